"""The step's KL coefficient: algo.kl_coef throughout, or an adaptive controller's (algo.kl_ctrl).

The loop asks `for_step(algo)` for the config the step's batch is prepared with (its kl_coef is
the controller's value, so a KL in the reward is weighed by it) and marks the batch with the same
value (`TrainingBatch.kl_coef`, read by the loss on every learner); after the update, `observe`
feeds the controller the batch's measured KL and returns the metrics to log: kl_coef (the value
this step used) and kl_ctrl/measured_kl. The controller's value is part of every checkpoint
(`state_dict`), so a resumed run continues with the coefficient it had.
"""

from __future__ import annotations

from reinforge.algos.kl_control import AdaptiveKLController, measured_kl
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch


class StepKLCoefficient:
    def __init__(self, algo: AlgoConfig):
        self.controller = (
            AdaptiveKLController(algo.kl_coef, algo.kl_target, algo.kl_horizon) if algo.kl_ctrl == "adaptive" else None
        )
        self.estimator = algo.kl_estimator

    def for_step(self, algo: AlgoConfig) -> AlgoConfig:
        if self.controller is None:
            return algo
        return algo.model_copy(update={"kl_coef": self.controller.value})

    def mark(self, batch: TrainingBatch) -> None:
        if self.controller is not None:
            batch.kl_coef = self.controller.value

    def observe(self, batch: TrainingBatch) -> dict[str, float]:
        if self.controller is None or batch.ref_logprobs is None:
            return {}
        used = self.controller.value
        kl = measured_kl(batch.old_logprobs, batch.ref_logprobs, batch.loss_mask, self.estimator)
        self.controller.update(kl, len(batch))
        return {"kl_coef": used, "kl_ctrl/measured_kl": kl}

    def state_dict(self) -> dict | None:
        return None if self.controller is None else self.controller.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        if self.controller is not None and state is not None:
            self.controller.load_state_dict(state)
