"""The schedule's collector with the curriculum pinned to the weights that sample each step.

A step's prompts are drawn inside its collection (`collect_groups`, `PartialCollector`), on the
thread that samples: the loop's in a sync run, the producer's under the async schedule. This wrapper
tells the curriculum sampler, before each collection, which version of itself to draw with (the step
of the sampling weights, `weights_index`) and which model featurizes the prompts (under async: the
producer's engine copy, which holds exactly those weights; in a sync run the learner's model is them),
and reports the draws' value/* metrics with the batch they drew, so no metric depends on which thread
got there first (reinforge.values.draw_versions has the rule and why).
"""

from __future__ import annotations

from collections.abc import Mapping

from reinforge.values.curriculum_sampler import CurriculumSampler


class CurriculumCollector:
    """Outermost in the loop's chain (around the value heads' collector, which sets the pruning hook on its own inner one)."""

    def __init__(self, inner, sampler: CurriculumSampler, lag: int, first_step: int):
        """`lag`: the schedule's L (step s samples with the weights of step s-1-L); 0 is the sync path."""
        self.inner, self.sampler, self.versioned = inner, sampler, lag > 0
        if self.versioned:
            sampler.start_versions(first_step - 1)  # the weights the run (or its resumed part) starts from

    def collect(self, engine, step: int, weights_index: int):
        self.sampler.draw_index = weights_index
        if self.versioned and self.sampler.values:  # several policies: each one's lane holds its sampling weights
            self.sampler.draw_model = {n: e.model for n, e in engine.items()} if isinstance(engine, Mapping) else engine.model
        else:
            self.sampler.draw_model = None
        collected, metrics = self.inner.collect(engine, step, weights_index)
        return collected, {**metrics, **self.sampler.take_draw_metrics()}

    def state_dict(self) -> dict:
        return self.inner.state_dict()  # transparent: the sampler's own state is saved by the loop

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)
