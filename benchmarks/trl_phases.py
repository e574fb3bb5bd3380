"""Time TRL GRPOTrainer's phases the same way for both vs-TRL harnesses (vs_trl.py's toy mode and
vs_trl_sides.py's real-model side): rollout and the reference's log-probs by wrapping the trainer's
own methods; the policy's own log-prob forward is timed as "_policy" (a leading "_" marks a part of
another phase, left out of the phase split); every scored batch goes to `on_scored`.
It patches private methods of trl 1.16 (`_generate`, `_get_per_token_logps_and_entropies`,
`_generate_and_score_completions`): a benchmark's dependency, never a runtime one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def time_trl_phases(trainer: Any, timed: Callable[..., Any], on_scored: Callable[[dict], None]) -> None:
    """`timed(name, fn, *args, **kwargs)` runs fn and adds its time to `name`."""
    generate = trainer._generate
    trainer._generate = lambda *a, **k: timed("rollout", generate, *a, **k)
    logps = trainer._get_per_token_logps_and_entropies

    def timed_logps(model, *a, **k):
        name = "reference" if trainer.ref_model is not None and model is trainer.ref_model else "_policy"
        return timed(name, logps, model, *a, **k)

    trainer._get_per_token_logps_and_entropies = timed_logps
    score = trainer._generate_and_score_completions

    def scored(*a, **k):
        out = score(*a, **k)
        on_scored(out)
        return out

    trainer._generate_and_score_completions = scored
