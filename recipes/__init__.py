"""Shipped YAML recipes (installed as the package `reinforge.recipes`)."""
