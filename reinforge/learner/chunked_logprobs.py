"""Per-token log-probs (and entropies) from final hidden states, a chunk of tokens at a time,
forward and backward: the [tokens, vocabulary] logits never exist for more than one chunk
(`algo.logprob_chunk_tokens`).

Why: with a real vocabulary the logits are the largest tensor of an update. SmolLM2-135M
(V = 49,152) on 8 prompts x 4 completions x 128 tokens: the whole micro-batch's fp32 logits,
their log-softmax, its exp for the entropy and the gradient of each are 839 MB apiece, and a
run peaked at 11.3 GiB (TRL: 8.5 GiB). Here only the hidden states h [N, H], the output weight
W [V, H] and two numbers per token (log-sum-exp, entropy) are kept for the backward, which
recomputes each chunk's logits.

Per chunk of hidden rows (z = h W^T + b, divided by the sampling temperature tau):
    lse_i       = log sum_v exp z_iv,         log p_iv = z_iv - lse_i
    log-prob    = log p_i[y_q]  for each query q = (row i = source_q, target token y_q)
    entropy     H_i = -sum_v p_iv log p_iv
Gradient (g_q: d loss / d log-prob of query q; e_i: d loss / d H_i; G_i = sum_{q: source_q = i} g_q):
    d log p_i[y] / d z_iv = [v = y] - p_iv
    d H_i / d z_iv        = -p_iv (log p_iv + H_i)
    d loss / d z_iv       = sum_{q at i, y_q = v} g_q - p_iv (G_i + e_i (log p_iv + H_i))
    d loss / d h_i = (d loss / d z_i) W / tau,   d loss / d W = sum_i (d loss / d z_i)^T h_i / tau.
Several queries may read one hidden row: the packed forward computes a shared prompt token
once, and each row that shares it asks for its own next token there.

Ideas from TRL's `selective_log_softmax` (log-softmax row by row, gather before the next row)
and Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv:2410.10989: the output
projection and the loss chunked together, gradients computed in the forward); here the gradient
is recomputed in the backward instead, so that the entropy's gradient (an entropy bonus) and
any loss on the log-probs work, and a no-grad forward (reference, old log-probs) pays nothing
for it.
Memory: two [chunk, V] fp32 buffers at a time (forward and backward), plus W's gradient. A
micro-batch of at most KEEP_ROWS_SHARE chunks keeps its log p from the forward for the backward
instead (smaller transients, the same peak): no logits product in the backward.
Under bf16 autocast the matmuls run in bf16 as `lm_head` would, the softmax in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Measured (4,096 tokens x H 576 x V 49,152, fp32, forward + backward with entropy, 1 thread,
# peak RSS above the inputs; CPU-s, two runs at load 6 and 10): chunks of 256 tokens 129 MiB
# (10.1, 10.5 s), 512: 231 MiB (9.6, 10.6 s), 1024: 429 MiB (9.4, 11.8 s), 2048: 816 MiB
# (9.2, 12.5 s); the whole logits 3,763 MiB (13.2, 10.5 s). The time is flat within the load's
# noise; the memory doubles with each step, 512 keeps it under 2% of a 135M model's update.
DEFAULT_CHUNK_TOKENS = 512
# With gradients, a micro-batch of at most this many chunks' rows keeps its whole log-softmax for
# the backward instead of recomputing the logits there (one [rows, H] x [H, V] product and a pass
# fewer: the LM head's share of an update's matmuls drops from 4 to 3). Its transients then
# shrink (kept_chunk) so that the peak stays at the recomputing path's two [chunk, V] buffers; at
# 1.5 chunks they are at least half a chunk.
KEEP_ROWS_SHARE = 1.5


def chunked_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    sources: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    entropy: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log p(targets[q] | hidden[sources[q]]) [Q], entropy of each hidden row's distribution [M] or None).

    hidden [M, H] (final, normed hidden states), weight [V, H] and bias [V] (the output layer),
    sources / targets [Q] (long). The entropy carries a gradient only with `entropy_grad`."""
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens} (algo.logprob_chunk_tokens)")
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [M, H] and weight [V, H] expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if sources.shape != targets.shape or sources.dim() != 1:
        raise ValueError(f"sources and targets must be [Q] alike, got {tuple(sources.shape)} and {tuple(targets.shape)}")
    logprobs, entropies = _ChunkedLogProbs.apply(
        hidden, weight, bias, sources, targets, float(temperature), int(chunk_tokens), entropy, entropy_grad
    )
    return logprobs, entropies if entropy else None


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype `lm_head` would run in: autocast's when it is on, else the inputs' own."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _chunk_bounds(sources: torch.Tensor, rows: int, chunk: int) -> tuple[torch.Tensor, list[int]]:
    """Queries sorted by hidden row, and where each chunk's queries start and end in that order."""
    order = sources.argsort(stable=True)
    starts = torch.arange(0, rows + chunk, chunk, device=sources.device).clamp(max=rows)
    return order, torch.searchsorted(sources[order], starts).tolist()


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, sources, targets, temperature, chunk, with_entropy, entropy_grad):
        dtype = _compute_dtype(hidden, weight)
        rows = hidden.shape[0]
        logprobs = torch.empty(sources.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        entropies = torch.zeros(rows if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
        kept = None
        if any(ctx.needs_input_grad[:3]) and 0 < rows <= KEEP_ROWS_SHARE * chunk:
            # the whole log-softmax stays for the backward, which then skips the logits' product
            kept = torch.empty(rows, weight.shape[0], dtype=torch.float32, device=hidden.device)
            chunk = kept_chunk(rows, chunk)
        order, bounds = _chunk_bounds(sources, rows, chunk)
        with torch.autocast(hidden.device.type, enabled=False):
            for i, start in enumerate(range(0, rows, chunk)):
                end = min(start + chunk, rows)
                # two [chunk, V] buffers: the logits, turned into log p in place, and exp(z - max)
                log_p = _logits(hidden[start:end].to(dtype), w, b, temperature, None if kept is None else kept[start:end])
                top = log_p.amax(-1, keepdim=True)
                log_p -= top
                queries = order[bounds[i] : bounds[i + 1]]
                shifted = log_p[sources[queries] - start, targets[queries]]  # z - max of each query
                if with_entropy or kept is not None:
                    unnormalized = log_p.exp()
                    total = unnormalized.sum(-1)
                    log_p -= total.log()[:, None]
                    if with_entropy:  # H = -sum p log p, p = exp(z - max) / total
                        entropies[start:end] = -(unnormalized.unsqueeze(1) @ log_p.unsqueeze(2)).view(-1) / total
                    del unnormalized
                else:  # only the log-sum-exp is read: one buffer, exponentiated in place
                    total = log_p.exp_().sum(-1)
                log_total = total.log()
                lse[start:end] = top.squeeze(1) + log_total
                logprobs[queries] = shifted - log_total[sources[queries] - start]  # the same float ops as log p's
                del log_p  # before the next chunk's logits are allocated
        ctx.save_for_backward(hidden, weight, bias, sources, targets, lse, entropies)
        ctx.temperature, ctx.chunk, ctx.dtype = temperature, chunk, dtype
        ctx.with_entropy = with_entropy
        ctx.kept = kept  # an intermediate, not an input or output: held on ctx, used by one backward
        if not (with_entropy and entropy_grad):
            ctx.mark_non_differentiable(entropies)
        ctx.set_materialize_grads(False)
        return logprobs, entropies

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropies):
        hidden, weight, bias, sources, targets, lse, entropies = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if grad_logprobs is None and grad_entropies is None:
            return (None,) * 9
        dtype, chunk, temperature = ctx.dtype, ctx.chunk, ctx.temperature
        rows = hidden.shape[0]
        device = hidden.device
        g_lp = torch.zeros(sources.shape[0], dtype=torch.float32, device=device) if grad_logprobs is None else grad_logprobs.float()
        g_ent = None if grad_entropies is None or not ctx.with_entropy else grad_entropies.float()
        # G_i: the log-prob gradients of all the queries that read hidden row i
        per_row = torch.zeros(rows, dtype=torch.float32, device=device).index_add_(0, sources, g_lp)
        kept, ctx.kept = ctx.kept, None  # a second backward (retain_graph) recomputes the logits
        order, bounds = _chunk_bounds(sources, rows, chunk)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=device) if need_b else None
        w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
        with torch.autocast(device.type, enabled=False):
            for i, start in enumerate(range(0, rows, chunk)):
                end = min(start + chunk, rows)
                h = hidden[start:end].to(dtype)
                if kept is None:
                    log_p = _logits(h, w, b, temperature)
                    log_p -= lse[start:end, None]
                else:  # the forward's log p, overwritten here: it is not read again
                    log_p = kept[start:end]
                p = log_p.exp()  # the second [chunk, V] buffer; the gradient is built in it
                if g_ent is None:
                    coef = per_row[start:end, None]
                else:  # in place on log p: G_i + e_i (log p + H_i)
                    coef = log_p.add_(entropies[start:end, None]).mul_(g_ent[start:end, None]).add_(per_row[start:end, None])
                grad_z = p.mul_(coef).neg_()
                queries = order[bounds[i] : bounds[i + 1]]
                grad_z.index_put_((sources[queries] - start, targets[queries]), g_lp[queries], accumulate=True)
                if temperature != 1.0:
                    grad_z /= temperature
                grad_z = grad_z.to(dtype)
                if need_h:
                    grad_h[start:end] = grad_z @ w
                if need_w:  # in place: no [V, H] temporary per chunk
                    grad_w.addmm_(grad_z.t(), h) if dtype == torch.float32 else grad_w.add_((grad_z.t() @ h).float())
                if need_b:
                    grad_b += grad_z.float().sum(0)
                del log_p, p, coef, grad_z  # (coef may be log_p itself) before the next chunk's logits are allocated
        del kept
        grad_w = None if grad_w is None else grad_w.to(weight.dtype)
        grad_b = None if grad_b is None else grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


def kept_chunk(rows: int, chunk: int) -> int:
    """The transient buffers' rows when the whole [rows, V] log-softmax is kept: the kept rows plus
    one transient stay within the two [chunk, V] buffers the recomputing path holds."""
    return rows if rows <= chunk else 2 * chunk - rows


def _logits(
    h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, temperature: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """One chunk's fp32 logits / temperature, as `lm_head(h).float() / temperature` computes them
    (into `out`, float32 rows of the kept log-softmax, when given)."""
    if out is not None and h.dtype == torch.float32:  # the product F.linear computes, written in place
        z = torch.mm(h, w.t(), out=out) if b is None else torch.addmm(b, h, w.t(), out=out)
    else:
        z = F.linear(h, w, b).float()
        if out is not None:
            z = out.copy_(z)
    if temperature != 1.0:
        z /= temperature
    return z
