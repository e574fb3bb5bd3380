"""Rebuilding the norms' outputs and SiLU(gate) x up in the backward (reinforge.learner.rebuilt_activations)
instead of keeping them: the same bits, less saved memory."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from packed_batches import grpo_rows, right_padded, small
from reinforge.kernels import choice
from reinforge.learner import packed_forward
from reinforge.learner.packed_forward import packed_token_logprobs, plan_packing
from reinforge.learner.rebuilt_activations import RebuiltActivations
from reinforge.models.lora import apply_lora, peft_available

needs_kernels = pytest.mark.skipif(
    not choice.wanted("auto", "algo.packed_kernels", packed_forward.KERNEL_SOURCES), reason="needs a C compiler"
)


def loss_and_gradients(model, rebuild: bool, monkeypatch, checkpoint_layers: bool = False):
    monkeypatch.setattr(packed_forward, "REBUILD_CHEAP_ACTIVATIONS", rebuild)
    ids, mask = right_padded(grpo_rows())
    model.zero_grad(set_to_none=True)
    chosen, entropy = packed_token_logprobs(
        model, ids, mask, plan_packing(ids, mask), kernels="native", entropy_grad=True, checkpoint_layers=checkpoint_layers,
    )
    loss = -(chosen * torch.linspace(-1, 1, chosen.shape[1])).sum() - 0.01 * entropy.sum()
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_bitwise_same(model, monkeypatch) -> None:
    loss_kept, kept = loss_and_gradients(model, False, monkeypatch)
    loss_rebuilt, rebuilt = loss_and_gradients(model, True, monkeypatch)
    assert torch.equal(loss_kept, loss_rebuilt)
    assert kept.keys() == rebuilt.keys() and kept
    for name in kept:
        assert torch.equal(kept[name], rebuilt[name]), name


@needs_kernels
def test_gradients_are_bitwise_those_of_keeping_the_activations(monkeypatch):
    assert_bitwise_same(small(LlamaForCausalLM, LlamaConfig), monkeypatch)


@needs_kernels
@pytest.mark.skipif(not peft_available(), reason="needs peft (reinforge[lora])")
def test_lora_gradients_are_bitwise_the_same(monkeypatch):
    from reinforge.config import LoraConfig

    model = apply_lora(small(LlamaForCausalLM, LlamaConfig), LoraConfig(r=4))
    with torch.no_grad():  # fresh adapters are zero (B = 0): give them a value, so that they matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    assert_bitwise_same(model, monkeypatch)


def saved_activation_bytes(model, rebuild: bool, monkeypatch) -> int:
    """Bytes autograd keeps for the backward of one packed forward, weights left out, counted with an
    outer saved_tensors_hooks (the rebuilding hooks hand on what they do not rebuild)."""
    monkeypatch.setattr(packed_forward, "REBUILD_CHEAP_ACTIVATIONS", rebuild)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def count(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids, mask = right_padded(grpo_rows())
    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        packed_token_logprobs(model, ids, mask, plan_packing(ids, mask), kernels="native")
    return sum(seen.values())


@needs_kernels
def test_less_is_saved_by_the_norms_and_swiglu_outputs(monkeypatch):
    config = dict(num_hidden_layers=4)
    model = small(LlamaForCausalLM, LlamaConfig, **config)
    ids, mask = right_padded(grpo_rows())
    tokens = plan_packing(ids, mask).num_tokens
    kept, rebuilt = saved_activation_bytes(model, False, monkeypatch), saved_activation_bytes(model, True, monkeypatch)
    hidden, intermediate = model.config.hidden_size, model.config.intermediate_size
    # per layer and token, two norms' outputs (H each) and SiLU(gate) x up (I) are no longer kept
    assert kept - rebuilt == 4 * model.config.num_hidden_layers * tokens * (2 * hidden + intermediate)


@needs_kernels
def test_checkpointed_layers_rebuild_nothing_of_their_own(monkeypatch):
    """Under activation checkpointing the layers are recomputed whole: the rebuilding hooks stay
    out of checkpoint's own, and the gradients are the same either way."""
    model = small(LlamaForCausalLM, LlamaConfig)
    loss_kept, kept = loss_and_gradients(model, False, monkeypatch, checkpoint_layers=True)
    loss_rebuilt, rebuilt = loss_and_gradients(model, True, monkeypatch, checkpoint_layers=True)
    assert torch.equal(loss_kept, loss_rebuilt)
    assert all(torch.equal(kept[name], rebuilt[name]) for name in kept)


def test_a_view_of_the_chosen_tensor_is_rebuilt_in_its_place():
    """A saved view (here the transpose a matmul keeps) comes back with its own shape and strides,
    and a tensor the block does not choose is handed to the outer hooks."""
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    outer: list[torch.Size] = []
    rebuilds = []

    def make() -> torch.Tensor:
        rebuilds.append(1)
        return (x * 2).detach()

    with torch.autograd.graph.saved_tensors_hooks(lambda t: outer.append(t.shape) or t, lambda t: t):
        with RebuiltActivations() as rebuilt:
            doubled = x * 2
            with rebuilt.rebuilt(doubled, make):
                out = doubled.t().t() @ w + (doubled @ w)
            other = (out * out).sum()  # `out` is saved by the square, outside the block
    other.backward()
    x_kept, w_kept = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    doubled = x_kept * 2
    out_kept = doubled.t().t() @ w_kept + (doubled @ w_kept)
    (out_kept * out_kept).sum().backward()
    assert torch.equal(x.grad, x_kept.grad) and torch.equal(w.grad, w_kept.grad)
    assert len(rebuilds) == 1  # two saved views of one tensor share one rebuild
    assert torch.Size([5, 4]) in outer and torch.Size([5, 3]) not in outer
