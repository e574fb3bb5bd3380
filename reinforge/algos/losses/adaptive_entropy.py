"""An entropy coefficient that switches the entropy bonus on when the policy's entropy falls too low.

At the end of every optimizer step k, with H_k the token-weighted mean entropy of the tokens the
policy term trained on in that step (all sampled tokens, or the top-entropy ones):

    c_{k+1} = min(c_k + delta, c_max)   if H_k <= H_target
    c_{k+1} = max(c_k - delta, c_min)   otherwise

and step k+1 subtracts  c_{k+1} * agg(entropy)  from its loss only if H_k <= H_target (no bonus
while the entropy is above the target; none in the first step, before any H was measured).

Source: He et al., "Skywork Open Reasoner 1 Technical Report" (2025, arXiv 2505.22312), adaptive
entropy control: a fixed coefficient is either too weak to stop entropy collapse or too strong
and blows the entropy up; tying it to a target entropy avoids both. The rule, its bounds and the
gate are TRL 1.16's `use_adaptive_entropy` (`entropy_target`, `entropy_coef_delta`,
`entropy_coef_min`, `entropy_coef_max`; GRPOTrainer._compute_loss), with the same defaults in
the config. The coefficient is trainer state: logged as `entropy_coef` and kept in checkpoints
(state_dict), so a resumed run continues the same schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class AdaptiveEntropyCoef:
    coef: float  # the coefficient (algo.entropy_coef is its start)
    target: float  # H_target, nats
    delta: float
    coef_min: float = 0.0
    coef_max: float = 1.0
    last_entropy: float = math.inf  # H of the last optimizer step: inf, so the first step has no bonus
    window_sum: float = 0.0  # entropy sum and token count of the micro-batches of the current step
    window_tokens: float = 0.0

    def __post_init__(self) -> None:
        if self.delta <= 0:
            raise ValueError(f"the entropy coefficient step must be > 0, got {self.delta}")
        if not 0 <= self.coef_min <= self.coef_max:
            raise ValueError(f"need 0 <= coef_min <= coef_max, got [{self.coef_min}, {self.coef_max}]")

    def applied(self) -> float:
        """The coefficient this step's loss uses: the current one, gated by the last entropy."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def observe(self, entropy_sum: float, tokens: float) -> None:
        """One micro-batch's entropy sum over the tokens the policy term trains on, and their count."""
        self.window_sum += float(entropy_sum)
        self.window_tokens += float(tokens)

    def end_step(self) -> float:
        """At the optimizer step's end: update the coefficient from the step's entropy; returns it."""
        entropy = self.window_sum / max(self.window_tokens, 1.0)
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy
        self.window_sum = self.window_tokens = 0.0
        return entropy

    def state_dict(self) -> dict[str, float]:
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.coef, self.last_entropy = float(state["coef"]), float(state["last_entropy"])
        self.window_sum = self.window_tokens = 0.0
