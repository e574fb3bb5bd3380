"""KL blow-up: the policy runs away from its reference.

    value = kl_ref at this step
    fires when value > monitor.kl_blowup.max_value, or when value > monitor.kl_blowup.min_value
    and value > monitor.kl_blowup.spike_factor x median(kl_ref over the previous W steps)

Reads `kl_ref` (mean per-token KL estimate to the reference policy; logged only when a reference
exists: algo.kl_coef > 0 or algo.ace_alpha > 0; otherwise this detector has nothing to watch).
A KL that jumps by a large factor within a few steps is the classic sign of an update that is too
large or of a reward being exploited far from the reference (Gao, Schulman and Hilton 2022,
"Scaling Laws for Reward Model Overoptimization", arXiv 2210.10760: proxy reward keeps rising with
KL while the true reward falls).
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, spike_reading

NAME = "kl_blowup"
ADVICE = "try a lower algo.lr, a larger algo.kl_coef, a tighter algo.clip_eps or algo.ref_reset_every; check the reward for exploits"


def check(history: History, settings, window: int) -> Reading | None:
    return spike_reading(history, "kl_ref", NAME, settings, window, lambda value, why: f"KL blow-up: kl_ref is {value:.3g}, {why}; {ADVICE}")
