"""The packed forward and the chunked log-softmax on an FSDP2-sharded model (workers.sharding=fsdp).

Why: FSDP2 gathers a module's shards in hooks on its `__call__` (and, through hooks it sets on
that call's inputs and outputs, reduce-scatters their gradients in the backward). The packed
forward (reinforge.learner.packed_forward) never calls a decoder layer: it calls the layer's
projections, norms and MLP one by one; and the chunked log-softmax
(reinforge.learner.chunked_logprobs) reads the output layer's weight directly, after the decoder,
outside any forward of the root. Neither would see full weights, so the sharded learner used to
fall back to `model(...)` and its [tokens, vocabulary] fp32 logits (SmolLM2, 49,152 entries a
token: 0.8 GB apiece for a micro-batch of 32 x 128 tokens, for the logits, their log-softmax and
the gradient of each).

`register_fsdp_forward_method` (torch.distributed.fsdp) runs a module's FSDP pre- and
post-forward hooks around another of its methods, exactly as around `forward`:
- on the root (embeddings, final norm, output layer), a call of any function (`under_root`): the
  learner's whole log-prob computation of a micro-batch runs in it, so the root's weights are
  gathered once for it and kept until the backward, as FSDP keeps the root's after `model(...)`;
  a tied output layer reads the embedding's gathered weight (one parameter, one shard, one gradient);
- on each decoder layer, the packed forward's step through that layer
  (`packed_forward.SHARDED_LAYER_METHOD`): one layer gathered at a time, freed after it, gathered
  again in the backward, its gradient reduce-scattered, as with the layer's own forward.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.fsdp import register_fsdp_forward_method

from reinforge.learner import packed_forward

ROOT_METHOD = "call_with_root_gathered"


def register_sharded_forwards(model: torch.nn.Module, layers: torch.nn.ModuleList) -> None:
    """Give the sharded root `model` the method ROOT_METHOD (for `under_root`) and each of its
    sharded decoder `layers` the packed forward's layer step, each under its FSDP hooks."""
    setattr(model, ROOT_METHOD, types.MethodType(_call, model))
    register_fsdp_forward_method(model, ROOT_METHOD)
    for layer in layers:
        setattr(layer, packed_forward.SHARDED_LAYER_METHOD, types.MethodType(packed_forward.run_layer, layer))
        register_fsdp_forward_method(layer, packed_forward.SHARDED_LAYER_METHOD)


def under_root(model: torch.nn.Module, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """`fn(*args, **kwargs)` as a forward of the sharded root `model` (`register_sharded_forwards`):
    the root's weights gathered for it, their gradients reduce-scattered after the backward."""
    return getattr(model, ROOT_METHOD)(fn, *args, **kwargs)


def _call(_root: torch.nn.Module, fn: Callable[..., Any], *args, **kwargs) -> Any:
    return fn(*args, **kwargs)
