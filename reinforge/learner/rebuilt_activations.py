"""Selective activation recompute: some tensors that autograd would keep for the backward are kept
as the recipe that made them, and made again when the backward reads them.

Why: an update's peak memory is one micro-batch's saved activations (about 1.15 MB per token on
SmolLM2-135M with the C kernels), and a smaller micro-batch costs update time (fewer rows per
matmul, more passes). Some of what a decoder layer keeps is one cheap elementwise pass away from
tensors that are kept anyway: each RMSNorm's output (read by the projections after it, for their
weight gradients) from the norm's input, which its own backward keeps; SiLU(gate) x up (read by
the down projection) from gate and up, which SwiGLU's backward keeps. Dropping those three keeps
2H + I fewer numbers per token per layer (2,688 of 8,457 on SmolLM2, 32%) for one extra norm or
SwiGLU pass per tensor in the backward. The matmuls' outputs are not rebuilt: that would be
recomputing the forward (algo.activation_checkpointing).

How: saved_tensors_hooks (torch's hooks on what autograd saves). While the consumers of a chosen
tensor run (`RebuiltActivations.rebuilt`), a saved tensor that is a view of it is packed as its
recipe and view geometry; unpacking runs the recipe once per backward of those consumers (the
q, k and v projections share one rebuild) and frees it with them. The recipe must give the same
bits: it runs the same kernel on the same inputs, so gradients are bitwise those of keeping the
tensor (tests/learner/test_rebuilt_activations.py). Every other tensor goes to the hooks that were
active outside (a memory count, torch's checkpointing), or is kept as is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


class _Recipe:
    """How to make a tensor again, shared by every saved view of it; the rebuilt values are kept
    while any saved view still needs them (autograd frees those with their node's backward)."""

    def __init__(self, storage: int, make: Callable[[], torch.Tensor]):
        self.storage = storage  # data_ptr of the chosen tensor's storage (it is alive while its consumers run)
        self.make = make
        self.values: torch.Tensor | None = None

    def rebuild(self) -> torch.Tensor:
        if self.values is None:
            self.values = self.make()
        return self.values


class _RebuiltView:
    """A saved tensor kept as its recipe and where it lay in the recipe's output."""

    def __init__(self, recipe: _Recipe, tensor: torch.Tensor):
        self.recipe = recipe
        self.geometry = (tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset())

    def unpack(self) -> torch.Tensor:
        shape, stride, offset = self.geometry
        return self.recipe.rebuild().as_strided(shape, stride, offset)


def _outer_hooks() -> tuple[Callable, Callable] | None:
    """The saved-tensor hooks active where this context starts: torch applies only the innermost,
    so these hooks hand on what they do not rebuild (torch has no public accessor for them)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(False) if top is not None else None


class RebuiltActivations:
    """A context in which `rebuilt(tensor, make)` marks the tensors to rebuild instead of keeping."""

    def __init__(self) -> None:
        self._recipe: _Recipe | None = None
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    def __enter__(self) -> RebuiltActivations:
        outer = _outer_hooks()
        outer_pack, outer_unpack = outer if outer is not None else (None, None)

        def pack(tensor: torch.Tensor):
            recipe = self._recipe
            if recipe is not None and tensor.untyped_storage().data_ptr() == recipe.storage:
                return _RebuiltView(recipe, tensor)
            return tensor if outer_pack is None else outer_pack(tensor)

        def unpack(packed) -> torch.Tensor:
            if isinstance(packed, _RebuiltView):
                return packed.unpack()
            return packed if outer_unpack is None else outer_unpack(packed)

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None

    @contextlib.contextmanager
    def rebuilt(self, tensor: torch.Tensor, make: Callable[[], torch.Tensor]) -> Iterator[None]:
        """While the block runs, whatever saves `tensor` (or a view of it) keeps `make` instead.
        `make()` must return `tensor`'s values bit for bit, from tensors autograd keeps anyway (or
        the recompute holds them alive), and `tensor` must not be changed in place."""
        if tensor.numel() == 0:  # nothing to save, and an empty storage's address is no identity
            yield
            return
        outer, self._recipe = self._recipe, _Recipe(tensor.untyped_storage().data_ptr(), make)
        try:
            yield
        finally:
            self._recipe = outer
