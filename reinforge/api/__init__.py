"""The Python API behind `reinforge.train`, `reinforge.evaluate` and `reinforge.load_config`
(re-exported, with the plug-in types, by `reinforge/__init__.py`)."""
