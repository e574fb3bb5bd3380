"""Log-prob gap blow-up: the rollout engine's log-probs drift from the learner's.

    value = logprob_gap/abs_mean at this step (mean |log p_learner - log p_engine| per sampled token)
    fires when value > monitor.logprob_gap_blowup.max_value, or when value > ...min_value and
    value > ...spike_factor x median(the gap over the previous W steps)

Every step logs the gap (reinforge.algos.logprob_gap), whatever the engine: an exact float32
engine measures ~1e-7, a bf16 or vLLM engine ~1e-3 to 1e-2. A gap that jumps means the data has
become off-policy beyond what the loss knows (Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training"): a weight sync that did not land, a dtype change,
or (async schedules) staler data; training on it is how mismatch-driven collapses start.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, spike_reading

NAME = "logprob_gap_blowup"
KEY = "logprob_gap/abs_mean"
ADVICE = "set algo.tis_cap (e.g. 2.0) to correct with truncated importance weights, use a float32 engine (rollout.engine_dtype) or a lower trainer.max_staleness"


def check(history: History, settings, window: int) -> Reading | None:
    return spike_reading(history, KEY, NAME, settings, window, lambda value, why: f"log-prob gap blow-up: the engine's log-probs differ from the learner's by {value:.3g} nats/token, {why}; {ADVICE}")
