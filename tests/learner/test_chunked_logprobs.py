"""Chunked log-probs and entropies (reinforge.learner.chunked_logprobs) against the whole-logits
computation: values and gradients on random tensors, to float bounds derived below; and the
memory they save, measured in a subprocess."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from reinforge.learner.chunked_logprobs import chunked_token_logprobs
from float_bounds import EPS32, SLACK

ROWS, HIDDEN, VOCAB = 45, 24, 70


def random_case(seed: int = 0, bias: bool = True):
    """Hidden rows, an output layer, and queries: several read one row, two rows are read by none
    (the packed forward's layout: a shared prompt token predicts each row's own next token)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(ROWS, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g) * 0.7
    b = torch.randn(VOCAB, generator=g) if bias else None
    sources = torch.cat([torch.arange(ROWS - 2), torch.randint(0, ROWS - 2, (20,), generator=g)])
    targets = torch.randint(0, VOCAB, sources.shape, generator=g)
    return hidden, weight, b, sources, targets


def exact(hidden, weight, bias, sources, targets, temperature):
    """The definition in float64: whole logits, log-softmax, gather; entropy -sum p log p."""
    z = hidden.double() @ weight.double().t()
    if bias is not None:
        z = z + bias.double()
    log_p = (z / temperature).log_softmax(-1)
    return log_p[sources, targets], -(log_p.exp() * log_p).sum(-1), log_p


def full_fp32(hidden, weight, bias, sources, targets, temperature):
    """What the learner computed before chunking: the whole [rows, V] logits in float32."""
    log_p = (torch.nn.functional.linear(hidden, weight, bias).float() / temperature).log_softmax(-1)
    return log_p[sources, targets], -(log_p.exp() * log_p).sum(-1)


def bounds(hidden, weight, bias, sources, targets, temperature, g_lp, g_ent):
    """Float32 error bounds of log-probs, entropies and the gradients w.r.t. hidden and W.

    A logit z = h.w / tau is a dot product of H terms: error <= SLACK sqrt(H) EPS32 S with
    S = max sum_k |h_k w_k| / tau (float_bounds, Higham 3.1); the log-sum-exp adds sqrt(V) EPS32 of
    its size. So log p errs by e = SLACK EPS32 (sqrt(H) S + sqrt(V) (1 + max|log p|)), every p by
    the relative e, and H = -sum p log p by e (1 + max|log p|) plus its own sum of V terms.
    The gradient w.r.t. z_v is m_v = |g| (p_v + [v = y]) + |e_ent| p_v (|log p_v| + H + 1) in size,
    each known to the relative e; grad h = sum_v gz_v W_v / tau sums V such terms, grad W sums N:
    (e + SLACK EPS32 sqrt(n)) x (the sum of |terms|)."""
    abs_z = hidden.double().abs() @ weight.double().abs().t() + (0 if bias is None else bias.double().abs())
    scale = abs_z.max().item() / temperature
    lp, ent, log_p = exact(hidden, weight, bias, sources, targets, temperature)
    top = log_p.abs().max().item()
    e = SLACK * EPS32 * (math.sqrt(HIDDEN) * scale + math.sqrt(VOCAB) * (1 + top))
    e_ent = e * (1 + top) + SLACK * EPS32 * math.sqrt(VOCAB) * ent.abs().max().item()
    p = log_p.exp()
    onehot = torch.zeros_like(p).index_put_((sources, targets), g_lp.double().abs(), accumulate=True)
    per_row = torch.zeros(hidden.shape[0], dtype=torch.float64).index_add_(0, sources, g_lp.double().abs())
    m = per_row[:, None] * p + onehot + g_ent.double().abs()[:, None] * p * (log_p.abs() + ent[:, None] + 1)
    grad_h = (e + SLACK * EPS32 * math.sqrt(VOCAB)) * (m @ weight.double().abs()) / temperature
    grad_w = (e + SLACK * EPS32 * math.sqrt(hidden.shape[0])) * (m.t() @ hidden.double().abs()) / temperature
    return e, e_ent, grad_h, grad_w


def assert_within(a, b, bound, what):
    excess = ((a.double() - b.double()).abs() - bound).max().item()
    assert excess <= 0, f"{what}: off by {excess:.3g} more than the float bound"


@pytest.mark.parametrize("chunk", [1, 7, 16, 1000])  # one row a chunk, ragged last chunk, one chunk
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_equal_the_whole_logits(chunk, temperature):
    hidden, weight, bias, sources, targets = random_case()
    g = torch.Generator().manual_seed(1)
    g_lp, g_ent = torch.randn(sources.shape, generator=g), torch.randn(ROWS, generator=g)
    e, e_ent, bound_h, bound_w = bounds(hidden, weight, bias, sources, targets, temperature, g_lp, g_ent)
    lp_ref, ent_ref, _ = exact(hidden, weight, bias, sources, targets, temperature)

    def run(fn):
        h, w, b = (t.clone().requires_grad_() for t in (hidden, weight, bias))
        lp, ent = fn(h, w, b, sources, targets, temperature)
        ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
        return lp.detach(), ent.detach(), h.grad, w.grad, b.grad

    def chunked(h, w, b, s, t, tau):
        return chunked_token_logprobs(h, w, b, s, t, tau, chunk, entropy=True, entropy_grad=True)

    h64, w64, b64 = (t.double().requires_grad_() for t in (hidden, weight, bias))
    lp64, ent64, _ = exact(h64, w64, b64, sources, targets, temperature)
    ((lp64 * g_lp.double()).sum() + (ent64 * g_ent.double()).sum()).backward()
    for name, fn in (("chunked", chunked), ("whole fp32 logits", full_fp32)):  # the bound holds for both
        lp, ent, grad_h, grad_w, grad_b = run(fn)
        assert_within(lp, lp_ref, e, f"{name} log-probs")
        assert_within(ent, ent_ref, e_ent, f"{name} entropies")
        assert_within(grad_h, h64.grad, bound_h, f"{name} grad hidden")
        assert_within(grad_w, w64.grad, bound_w, f"{name} grad W")
        assert_within(grad_b, b64.grad, bound_w.max(), f"{name} grad bias")
    # the bounds are far below what a wrong gradient moves: the entropy term alone
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, _ = chunked_token_logprobs(h, w, bias, sources, targets, temperature, chunk, entropy=False)
    (lp * g_lp).sum().backward()
    assert ((h.grad.double() - h64.grad).abs() - bound_h).max() > 100 * bound_h.max()


GPU = os.environ.get("REINFORGE_GPU_TEST_DEVICE", "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(GPU.startswith("cuda") and not torch.cuda.is_available(), reason="needs a CUDA GPU (REINFORGE_GPU_TEST_DEVICE=cpu runs it here)")
def test_on_the_gpu_values_and_gradients_equal_the_definition_and_bf16_autocast_runs():
    hidden, weight, bias, sources, targets = random_case()
    g = torch.Generator().manual_seed(1)
    g_lp, g_ent = torch.randn(sources.shape, generator=g), torch.randn(ROWS, generator=g)
    e, e_ent, bound_h, bound_w = bounds(hidden, weight, bias, sources, targets, 0.7, g_lp, g_ent)
    lp_ref, ent_ref, _ = exact(hidden, weight, bias, sources, targets, 0.7)
    h64, w64 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    lp64, ent64, _ = exact(h64, w64, bias, sources, targets, 0.7)
    ((lp64 * g_lp.double()).sum() + (ent64 * g_ent.double()).sum()).backward()
    h, w = (t.to(GPU).requires_grad_() for t in (hidden, weight))
    on = [t.to(GPU) for t in (bias, sources, targets, g_lp, g_ent)]
    lp, ent = chunked_token_logprobs(h, w, on[0], on[1], on[2], 0.7, 16, entropy=True, entropy_grad=True)
    ((lp * on[3]).sum() + (ent * on[4]).sum()).backward()
    assert_within(lp.cpu(), lp_ref, e, "log-probs")
    assert_within(ent.cpu(), ent_ref, e_ent, "entropies")
    assert_within(h.grad.cpu(), h64.grad, bound_h, "grad hidden")
    assert_within(w.grad.cpu(), w64.grad, bound_w, "grad W")
    device_type = torch.device(GPU).type
    with torch.autocast(device_type, dtype=torch.bfloat16):
        lp16, _ = chunked_token_logprobs(h, w, on[0], on[1], on[2], 0.7, 16)
        ref16 = torch.nn.functional.linear(h, w, on[0]).float().div(0.7).log_softmax(-1)[on[1], on[2]]
    torch.testing.assert_close(lp16, ref16, atol=1e-5, rtol=0)
    lp16.sum().backward()  # the backward runs in bf16 too, and returns fp32 gradients for fp32 inputs
    assert w.grad.dtype == torch.float32


def test_entropy_without_gradient_is_detached_and_leaves_the_logprob_gradient_alone():
    hidden, weight, _, sources, targets = random_case(bias=False)
    grads = []
    for entropy_grad in (False, True):
        h = hidden.clone().requires_grad_()
        lp, ent = chunked_token_logprobs(h, weight, None, sources, targets, 1.0, 8, entropy=True, entropy_grad=entropy_grad)
        assert ent.requires_grad == entropy_grad
        lp.sum().backward()
        grads.append(h.grad)
    assert torch.equal(grads[0], grads[1])
    lp, ent = chunked_token_logprobs(hidden, weight, None, sources, targets, entropy=False)
    assert ent is None and lp.shape == sources.shape
    # a loss on the entropy alone (an entropy bonus) back-propagates too
    h = hidden.clone().requires_grad_()
    _, ent = chunked_token_logprobs(h, weight, None, sources, targets, 1.0, 8, entropy=True, entropy_grad=True)
    ent.sum().backward()
    assert h.grad.abs().max() > 0


def test_frozen_output_layer_gets_no_gradient_and_no_grad_mode_builds_no_graph():
    hidden, weight, _, sources, targets = random_case(bias=False)
    h = hidden.clone().requires_grad_()
    lp, _ = chunked_token_logprobs(h, weight, None, sources, targets, 1.0, 8)
    lp.sum().backward()
    assert h.grad is not None and weight.grad is None  # a LoRA model's frozen lm_head
    with torch.no_grad():
        lp, ent = chunked_token_logprobs(h, weight, None, sources, targets, 1.0, 8)
    assert lp.grad_fn is None and ent.grad_fn is None


def test_bf16_autocast_runs_the_matmuls_in_bf16_like_lm_head():
    hidden, weight, bias, sources, targets = random_case()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, ent = chunked_token_logprobs(hidden, weight, bias, sources, targets, 0.7, 8)
        ref_lp, ref_ent = full_fp32(hidden, weight, bias, sources, targets, 0.7)
    assert lp.dtype == torch.float32
    # the same bf16 logits, the softmax in fp32 on both sides: fp32 rounding apart
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)
    fp32_lp, _ = chunked_token_logprobs(hidden, weight, bias, sources, targets, 0.7, 8)
    assert (fp32_lp - lp).abs().max() > 1e-4  # bf16 was really used


def test_bad_arguments_say_what_is_wrong():
    hidden, weight, _, sources, targets = random_case(bias=False)
    with pytest.raises(ValueError, match="algo.logprob_chunk_tokens"):
        chunked_token_logprobs(hidden, weight, None, sources, targets, chunk_tokens=0)
    with pytest.raises(ValueError, match=r"hidden \[M, H\] and weight \[V, H\]"):
        chunked_token_logprobs(hidden, weight[:, :5], None, sources, targets)
    with pytest.raises(ValueError, match="sources and targets"):
        chunked_token_logprobs(hidden, weight, None, sources, targets[:3])


MEASURE = textwrap.dedent(
    """
    import json, resource, sys, torch
    torch.set_num_threads(1)
    from reinforge.learner.chunked_logprobs import chunked_token_logprobs
    tokens, hidden_size, vocab, chunk = map(int, sys.argv[1:5])
    g = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden_size, generator=g).requires_grad_()
    w = (torch.randn(vocab, hidden_size, generator=g) * 0.1).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    sources = torch.arange(tokens)

    def peak_rss() -> int:
        # VmHWM, which reset_peak() can lower (ru_maxrss never falls: a peak from before the
        # measurement, e.g. pages the allocator kept, would hide the one measured)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    def current_rss() -> int:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return peak_rss()

    def reset_peak() -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux 4.0+)
        except OSError:
            pass

    # warm-up on a small case: the kernels' code pages and thread buffers count in RSS on first use
    small = chunked_token_logprobs(h[:8], w, None, sources[:8], targets[:8], 1.0, 4, entropy=True, entropy_grad=True)
    (small[0].sum() + small[1].sum()).backward()
    log_p = (h[:8] @ w.t()).log_softmax(-1)
    (log_p[sources[:8], targets[:8]].sum() - (log_p.exp() * log_p).sum()).backward()
    h.grad = w.grad = small = log_p = None
    reset_peak()
    start = current_rss()
    lp, ent = chunked_token_logprobs(h, w, None, sources, targets, 1.0, chunk, entropy=True, entropy_grad=True)
    (lp.sum() + 0.1 * ent.sum()).backward()
    chunked = peak_rss() - start
    h.grad = w.grad = None
    # then the whole logits, as before: the high-water mark can only rise from the chunked one
    reset_peak()
    log_p = (h @ w.t()).log_softmax(-1)
    lp, ent = log_p[sources, targets], -(log_p.exp() * log_p).sum(-1)
    (lp.sum() + 0.1 * ent.sum()).backward()
    print(json.dumps({"chunked": chunked, "whole": peak_rss() - start}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB, and MALLOC_MMAP_THRESHOLD_ is glibc's, on Linux")
def test_forward_and_backward_peak_memory_stays_below_one_whole_logits_tensor():
    """Peak RSS of a forward + backward (with entropy) over T x V = 2048 x 16384: the whole fp32
    logits are 128 MiB, and the computation without chunks holds several such tensors. Chunked,
    the peak is W's gradient (V x H x 4 bytes), hidden's, and per chunk two [chunk, V] fp32
    buffers (the logits turned into log p in place, and the probabilities turned into the
    gradient in place), plus 8 MiB of slack (small tensors, the allocator's rounding).
    glibc's mmap threshold is fixed at 1 MiB in the subprocess so that every freed buffer leaves
    the RSS at once (by default the threshold moves with the sizes freed, and freed heap memory
    may stay resident): the measurement is then the tensors' own high-water mark."""
    tokens, hidden_size, vocab, chunk = 2048, 64, 16384, 256
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tokens), str(hidden_size), str(vocab), str(chunk)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, out.stderr
    measured = json.loads(out.stdout.splitlines()[-1])
    whole_logits = tokens * vocab * 4
    bound = (vocab * hidden_size + tokens * hidden_size + 2 * chunk * vocab) * 4 + 8 * 2**20
    assert bound < whole_logits / 2
    assert measured["whole"] > 2 * whole_logits, measured  # the harness sees the memory it is meant to see
    assert measured["chunked"] <= bound, f"chunked peak {measured['chunked'] / 2**20:.0f} MiB > bound {bound / 2**20:.0f} MiB"


def test_a_micro_batch_within_the_keep_share_skips_the_logits_product_in_the_backward(monkeypatch):
    """With at most KEEP_ROWS_SHARE chunks' rows the forward's log-softmax is kept for the backward:
    the logits are computed once per chunk (forward only) instead of twice; the gradients are the
    recomputing path's to the float bound above, and a second backward (retain_graph) recomputes."""
    from reinforge.learner import chunked_logprobs as module

    hidden, weight, bias, sources, targets = random_case(3)
    g = torch.Generator().manual_seed(4)
    g_lp, g_ent = torch.randn(sources.shape, generator=g), torch.randn(ROWS, generator=g)
    _, _, bound_h, bound_w = bounds(hidden, weight, bias, sources, targets, 0.7, g_lp, g_ent)
    calls = []
    logits = module._logits
    monkeypatch.setattr(module, "_logits", lambda *a, **k: calls.append(len(a[0])) or logits(*a, **k))

    def grads(keep_share, chunk, backwards=1):
        monkeypatch.setattr(module, "KEEP_ROWS_SHARE", keep_share)
        calls.clear()
        h, w, b = (t.clone().requires_grad_() for t in (hidden, weight, bias))
        lp, ent = chunked_token_logprobs(h, w, b, sources, targets, 0.7, chunk, entropy=True, entropy_grad=True)
        for _ in range(backwards):
            ((lp * g_lp).sum() + (ent * g_ent).sum()).backward(retain_graph=True)
        return h.grad, w.grad, list(calls)

    for chunk, forward_chunks in ((1000, [ROWS]), (36, [27, 18])):  # 45 rows: one chunk; 1.25 chunks
        kept_h, kept_w, kept_calls = grads(1.5, chunk)
        assert kept_calls == forward_chunks  # transients of 2 * 36 - 45 = 27 rows: the peak of two 36-row buffers
        redone_h, redone_w, redone_calls = grads(0.0, chunk)
        assert len(redone_calls) == 2 * len(range(0, ROWS, chunk))
        assert_within(kept_h, redone_h, 2 * bound_h, "grad hidden, kept against recomputed")
        assert_within(kept_w, redone_w, 2 * bound_w, "grad W, kept against recomputed")
    twice_h, _, twice_calls = grads(1.5, 1000, backwards=2)  # the second backward recomputes
    assert twice_calls == [ROWS, ROWS]
    assert_within(twice_h, 2 * kept_h, 4 * bound_h, "grad hidden after two backwards")
    _, _, no_grad_calls = grads(1.5, 16)  # 45 rows > 1.5 x 16: recomputed
    assert no_grad_calls == [16, 16, 13] * 2


@pytest.mark.skipif(sys.platform != "linux", reason="VmHWM and MALLOC_MMAP_THRESHOLD_ are Linux / glibc")
def test_keeping_the_log_softmax_peaks_no_higher_than_recomputing_it():
    """360 rows, chunks of 256 (1.4 chunks): the kept [360, V] log-softmax plus 152-row transients
    against the recomputing path's two 256-row buffers, each a forward + backward measured in a
    fresh subprocess (the MEASURE script's harness, its keep share set by an environment variable)."""
    tokens, hidden_size, vocab, chunk = 360, 64, 16384, 256
    peaks = {}
    for share in ("0", "1.5"):
        script = MEASURE.replace(
            "from reinforge.learner.chunked_logprobs import chunked_token_logprobs",
            "from reinforge.learner import chunked_logprobs as m; m.KEEP_ROWS_SHARE = float(sys.argv[5]);"
            " from reinforge.learner.chunked_logprobs import chunked_token_logprobs",
        )
        env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "MALLOC_MMAP_THRESHOLD_": str(2**20)}
        out = subprocess.run(
            [sys.executable, "-c", script, str(tokens), str(hidden_size), str(vocab), str(chunk), share],
            capture_output=True, text=True, timeout=300, env=env,
        )
        assert out.returncode == 0, out.stderr
        peaks[share] = json.loads(out.stdout.splitlines()[-1])["chunked"]
    two_buffers = 2 * chunk * vocab * 4
    assert peaks["0"] >= two_buffers  # the harness sees the buffers
    assert peaks["1.5"] <= peaks["0"] + 2**20, {k: v / 2**20 for k, v in peaks.items()}


def test_without_entropy_the_log_probs_are_bitwise_those_with_it():
    """The no-entropy forward (a reference pass) exponentiates the logits in place and never
    normalizes them: the log-probs are the same float operations, so the same bits."""
    hidden, weight, bias, sources, targets = random_case(5)
    for chunk in (7, 1000):
        with_entropy, _ = chunked_token_logprobs(hidden, weight, bias, sources, targets, 0.7, chunk, entropy=True)
        without, none = chunked_token_logprobs(hidden, weight, bias, sources, targets, 0.7, chunk, entropy=False)
        assert none is None and torch.equal(with_entropy, without)
