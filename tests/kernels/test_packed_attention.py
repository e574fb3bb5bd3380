"""The packed forward's C attention (reinforge.kernels.packed_attention): outputs and gradients
against a float64 attention written from its definition; the packed log-probs and gradients with
all the C kernels against torch's; the fallback without a compiler; the config reaching the learner."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from reinforge.kernels import build as native_build
from reinforge.config import load_config
from reinforge.kernels.packed_attention import RowPlan, packed_attention
from reinforge.learner.packed_forward import native_kernels_wanted, packed_token_logprobs, plan_packing
from reinforge.learner.policy_learner import PolicyLearner
from float_bounds import EPS32

from packed_batches import grpo_rows, right_padded, small
from transformers import LlamaConfig, LlamaForCausalLM


def attention_by_definition(q, k, v, plan: RowPlan, scale: float) -> torch.Tensor:
    """out[u, h] = softmax_s(scale q[u, h] . k[src_s]) v[src_s] over slots s <= t of the row that
    computes u at slot t: one row, one query at a time, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    for r in range(plan.source.shape[0]):
        src = plan.source[r]
        for t in range(int(plan.first[r]), int(plan.length[r])):
            keys = k[src[: t + 1]].repeat_interleave(rep, dim=1)  # [t + 1, heads, d]
            values = v[src[: t + 1]].repeat_interleave(rep, dim=1)
            weights = torch.einsum("hd,shd->hs", q[src[t]], keys).mul(scale).softmax(-1)
            out[src[t]] = torch.einsum("hs,shd->hd", weights, values)
    return out


def error_bound(reference: torch.Tensor, plan: RowPlan, dim: int) -> float:
    """float32 against float64: each output and gradient is a sum over at most `length` slots of
    terms built from dot products of `dim` products (and exp's polynomial, 2e-7 relative), so its
    rounding error is at most ~(2 length + dim + 2e-7 / u) u times the largest term, bounded by the
    largest |reference| times `length` (the terms' sizes, cancellation included); x4 slack.
    A wrong slot or head mapping errs by the size of the values themselves (~1), far above it."""
    length = int(plan.length.max())
    return 4 * (2 * length + dim + 2e-7 / EPS32) * EPS32 * length * reference.abs().max().item()


def packed_case(heads: int, kv_heads: int, dim: int, seed: int = 0):
    """q, k, v for the packing of GRPO-like rows: shared prompts, completions of 1-20 tokens, a row
    that diverges late, and a row that repeats another (it computes nothing)."""
    ids, mask = right_padded(grpo_rows(seed=seed))
    packing = plan_packing(ids, mask)
    g = torch.Generator().manual_seed(seed)
    tokens = packing.num_tokens
    q = torch.randn(tokens, heads, dim, generator=g)
    k = torch.randn(tokens, kv_heads, dim, generator=g) * 2
    v = torch.randn(tokens, kv_heads, dim, generator=g)
    return q, k, v, packing.rows


@pytest.mark.parametrize(
    "heads,kv_heads,dim", [(4, 4, 32), (4, 2, 32), (8, 2, 64), (9, 3, 64), (2, 1, 128), (3, 3, 17)],
    ids=["MHA-32", "GQA-2:1", "GQA-4:1-64", "GQA-3:1-64 (SmolLM2)", "GQA-128", "odd-17"],
)
def test_outputs_and_gradients_match_the_definition(heads, kv_heads, dim) -> None:
    q, k, v, plan = packed_case(heads, kv_heads, dim)
    scale = dim**-0.5
    ours_in = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_in = [t.double().requires_grad_() for t in (q, k, v)]
    ours = packed_attention(*ours_in, plan, scale)
    reference = attention_by_definition(*ref_in, plan, scale)
    assert (ours.double() - reference).abs().max().item() <= error_bound(reference, plan, dim)
    d_out = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1))
    ours.backward(d_out)
    reference.backward(d_out.double())
    for mine, theirs, name in zip(ours_in, ref_in, "qkv"):
        gap = (mine.grad.double() - theirs.grad).abs().max().item()
        assert gap <= error_bound(theirs.grad, plan, dim), f"d{name}: {gap}"
        assert theirs.grad.abs().max() > 0.1  # every input has a gradient to compare


def test_by_hand_one_row_of_two_tokens() -> None:
    # one head of dim 1: token 1 attends to tokens 0 and 1 with scores 1 * 2 = 2 and 1 * 0 = 0
    q = torch.tensor([[[1.0]], [[1.0]]])
    k = torch.tensor([[[2.0]], [[0.0]]])
    v = torch.tensor([[[3.0]], [[-1.0]]])
    plan = RowPlan(torch.tensor([[0, 1]]), torch.tensor([0]), torch.tensor([2]))
    out = packed_attention(q, k, v, plan, 1.0)
    w = torch.tensor(2.0).exp() / (torch.tensor(2.0).exp() + 1)  # weight of token 0 for token 1
    assert out[0, 0, 0].item() == pytest.approx(3.0)  # token 0 sees itself only
    assert out[1, 0, 0].item() == pytest.approx((w * 3 + (1 - w) * -1).item(), rel=1e-6)


def test_packed_logprobs_match_torchs_kernels() -> None:
    model = small(LlamaForCausalLM, LlamaConfig)
    ids, mask = right_padded(grpo_rows())
    packing = plan_packing(ids, mask)
    grads = {}
    for mode in ("torch", "native"):
        model.zero_grad()
        logprobs, _ = packed_token_logprobs(model, ids, mask, packing, kernels=mode)
        logprobs.sum().backward()
        grads[mode] = (logprobs.detach(), [p.grad.clone() for p in model.parameters()])
    (torch_lp, torch_grads), (native, native_grads) = grads["torch"], grads["native"]
    # log-probs of a 2-layer model over <= 32 slots: both paths sum in float32 in different orders
    assert (torch_lp - native).abs().max().item() < 1e-5
    for a, b in zip(torch_grads, native_grads):
        assert (a - b).abs().max().item() <= 1e-5 * max(a.abs().max().item(), 1.0)


def test_refuses_bad_inputs() -> None:
    q, k, v, plan = packed_case(4, 2, 8)
    with pytest.raises(ValueError, match="float32 CPU"):
        packed_attention(q.double(), k, v, plan, 1.0)
    with pytest.raises(ValueError, match="do not fit"):
        packed_attention(q[:, :3], k, v, plan, 1.0)  # 3 heads over 2 kv heads
    with pytest.raises(ValueError, match="do not fit"):
        packed_attention(q, k, v[:-1], plan, 1.0)
    with pytest.raises(ValueError, match=f"the rows compute {len(q)} tokens, q has {len(q) + 1}"):
        packed_attention(*(torch.cat([t, t[:1]]) for t in (q, k, v)), plan, 1.0)  # a token no row computes
    bad_source = plan.source.clone()
    bad_source[0, 0] = len(q)
    with pytest.raises(ValueError, match="outside"):
        packed_attention(q, k, v, RowPlan(bad_source, plan.first, plan.length), 1.0)
    with pytest.raises(ValueError, match="first <= length <= its slots"):
        RowPlan(plan.source, plan.first, plan.length + plan.source.shape[1])
    with pytest.raises(ValueError, match="one entry per row"):
        RowPlan(plan.source, plan.first[:-1], plan.length)


def test_without_a_compiler_auto_falls_back_and_native_says_why(broken_compiler) -> None:
    model = small(LlamaForCausalLM, LlamaConfig)
    assert not native_kernels_wanted("auto")
    with pytest.raises(native_build.NativeCodeUnavailable, match="false failed on packed_attention.c"):
        PolicyLearner(model, lr=1e-3, packed_kernels="native")
    learner = PolicyLearner(model, lr=1e-3)  # auto: SDPA
    ids, mask = right_padded(grpo_rows())
    logprobs, _ = packed_token_logprobs(model, ids, mask, plan_packing(ids, mask), kernels=learner.packed_kernels)
    assert torch.isfinite(logprobs).all()
    assert list(broken_compiler.iterdir()) == []


def test_config_reaches_the_learner_and_reference() -> None:
    from reinforge.run.pipeline import build_learners, build_reference

    cfg = load_config("default", ["algo.packed_kernels=torch", "algo.kl_coef=0.05"])
    model = small(LlamaForCausalLM, LlamaConfig)
    learner = build_learners(cfg, {"policy": model}, SimpleNamespace(max_turns=1))[0]["policy"]
    assert learner.packed_kernels == "torch"
    assert build_reference(cfg, model).packed_kernels == "torch"
    with pytest.raises(Exception, match="packed_kernels"):
        load_config("default", ["algo.packed_kernels=fast"])


def test_no_rows_no_tokens() -> None:
    empty = torch.zeros(0, 2, 8, requires_grad=True)
    plan = RowPlan(torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    out = packed_attention(empty, empty, empty, plan, 1.0)
    out.sum().backward()
    assert out.shape == (0, 2, 8) and empty.grad.shape == (0, 2, 8)
