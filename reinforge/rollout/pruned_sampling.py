"""Rollout pruning on any engine: sample in chunks, check the live rows' prefixes between chunks.

The in-process TorchEngine stops rows from inside its decode loop (a decode hook,
reinforge.engines.decode_hook). An engine without one (vLLM, Ray rollout workers:
`supports_decode_hook` False), a multi-turn episode and a partial rollout get the same checks
through the Engine protocol alone: each live row samples up to the next multiple of the hook's
`every` tokens of its turn (per-row `budgets`), the call returns, the hook judges every row still
running at that prefix (`check_prefixes`, with a `PrefixCheck`) and the rows it does not stop are
fed back as prompt + the tokens sampled so far, with what is left of their budget. So the checks
fall at the same prefix lengths as in the decode loop (every, 2 every, ... tokens of the turn),
which are also the prefixes the success head trains on.

Rows are group members `(group, index)`: the hook keeps each group's accounting by member, so it
sees every member of a group across the turns of a multi-turn episode and across the rounds of a
partial rollout, not only the rows of one engine call. `settled` tells it which members have
already finished unpruned (their episodes ended, or their turn ended this call).

The partial-rollout stop rule (`stop_when`, a GroupQuota) is checked at chunk boundaries, over
rows finished or pruned: a chunk is not stopped midway (a row that reaches a chunk's end is not a
finished row, which the engine's rule could not tell apart), so a round may run up to `every`
tokens past the moment its quota was met; the rows still running then come back "aborted".
Costs: one engine call and one forward of the in-process policy over the live rows' prefixes per
chunk (an engine that caches prefixes, like vLLM, does not recompute the shared part).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

import torch

from reinforge.engines.base import Engine, Generation, SamplingParams

Member = tuple[Hashable, int]  # (group, index of the episode in its group)


@dataclass
class PrefixCheck:
    """What the chunked sampler knows at a check, for each live row (one per entry).

    members: the group member each row is.
    contexts: the tokens the policy conditions on next (prompt, earlier turns, this turn so far).
    logprobs: the behaviour log-probs of the tokens this turn sampled so far (s = len).
    settled: for each group with a live row, its members that finished unpruned.
    """

    members: list[Member]
    contexts: list[list[int]]
    logprobs: list[list[float]]
    settled: dict[Hashable, list[Member]]


class PrefixPruner(Protocol):
    every: int  # tokens of a turn between checks

    def check_prefixes(self, check: PrefixCheck) -> list[bool]:
        """For each live row: stop it now."""
        ...


def chunk_seed(seed: int | None, chunk: int) -> int | None:
    """Chunk 0 samples with the call's seed; later chunks with seeds derived from it."""
    if seed is None or chunk == 0:
        return seed
    return seed * 1_000_039 + chunk


def generate_pruned(
    engine: Engine,
    prompts: list[list[int]],
    params: SamplingParams,
    seed: int | None,
    pruner: PrefixPruner,
    members: list[Member],
    settled: dict[Hashable, list[Member]],
    budgets: list[int] | None = None,
    prior_logprobs: list[list[float]] | None = None,
    stop_when: Callable[[torch.Tensor], bool] | None = None,
) -> list[Generation]:
    """As `engine.generate(prompts, params, seed, budgets, stop_when)`, with the rows `pruner`
    stops coming back "pruned" (their tokens kept). `prior_logprobs`: each row's turn sampled these
    tokens before (a resumed partial rollout: they end its prompt); `settled`: the members that
    finished unpruned before this call (module docstring)."""
    rows = len(prompts)
    caps = budgets if budgets is not None else [params.max_new_tokens] * rows
    prior = prior_logprobs if prior_logprobs is not None else [[] for _ in range(rows)]
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    errors: list[list[str]] = [[] for _ in range(rows)]
    versions: list[int | None] = [None] * rows
    reasons: list[str | None] = [None] * rows
    settled = {group: list(done) for group, done in settled.items()}
    live = list(range(rows))
    chunk = 0
    while live:
        sizes = [min(caps[i] - len(tokens[i]), pruner.every - (len(prior[i]) + len(tokens[i])) % pruner.every) for i in live]
        generations = engine.generate([prompts[i] + tokens[i] for i in live], params, seed=chunk_seed(seed, chunk), budgets=sizes)
        chunk += 1
        for i, g in zip(live, generations):
            tokens[i] += g.token_ids
            logprobs[i] += g.logprobs
            errors[i] += g.errors
            versions[i] = g.policy_version if versions[i] is None else min(versions[i], g.policy_version)
            if g.finish_reason == "stop" or len(tokens[i]) >= caps[i]:
                reasons[i] = g.finish_reason if g.finish_reason == "stop" else "length"
                settled.setdefault(members[i][0], []).append(members[i])
        live = [i for i in live if reasons[i] is None]
        if live:
            check = PrefixCheck(
                [members[i] for i in live], [prompts[i] + tokens[i] for i in live], [prior[i] + logprobs[i] for i in live],
                {members[i][0]: list(settled.get(members[i][0], [])) for i in live},
            )
            for i, stop in zip(list(live), pruner.check_prefixes(check)):
                if stop:
                    reasons[i] = "pruned"
            live = [i for i in live if reasons[i] is None]
        if live and stop_when is not None and stop_when(torch.tensor([r is not None for r in reasons])):
            for i in live:
                reasons[i] = "aborted"
            live = []
    return [
        Generation(tokens[i], logprobs[i], reasons[i], versions[i] or 0, errors[i]) for i in range(rows)
    ]
