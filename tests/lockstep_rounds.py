"""What a partial round's stop rule leaves of a batch, sampled in lock-step: the reference the vLLM
tests compare an engine that samples its rows out of step against (reinforge.engines.lockstep_stop)."""

from __future__ import annotations

from reinforge.engines.lockstep_stop import LockstepStop

STOPS = tuple(range(200, 230))  # 30 of the ~260 tokens: a random model's rows end at different lengths


def lockstep_cut(full, rule) -> list[tuple[list[int], str]]:
    """Where TorchEngine, sampling these rows one token per step, would have stopped them."""
    stop = LockstepStop(rule, len(full))
    for step in range(1, max(len(g.token_ids) for g in full) + 1):
        held = [min(step, len(g.token_ids)) for g in full]
        finished = [n == len(g.token_ids) for n, g in zip(held, full)]
        if stop.update(held, finished) is not None:
            break
    out = []
    for g in full:
        keep, aborted = stop.cut(len(g.token_ids), True)
        out.append((g.token_ids[:keep], "aborted" if aborted else g.finish_reason))
    return out
