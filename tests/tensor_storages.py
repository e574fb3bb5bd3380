"""The tensor storages an object holds: what a memory test counts (shared storages once)."""

from __future__ import annotations

import torch


def storages(value, seen: set | None = None) -> dict[int, int]:
    """data_ptr -> bytes of every tensor storage an object holds (through lists, tuples, dicts and attributes)."""
    seen = set() if seen is None else seen
    found: dict[int, int] = {}
    if id(value) in seen:
        return found
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        return {storage.data_ptr(): storage.nbytes()}
    if isinstance(value, (list, tuple)):
        parts = value
    elif isinstance(value, dict):
        parts = list(value.values())
    elif hasattr(value, "__dict__") and not isinstance(value, (torch.nn.Module, type)):
        parts = list(vars(value).values())
    else:
        return found
    for part in parts:
        found.update(storages(part, seen))
    return found
