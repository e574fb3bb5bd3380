"""Several policies on data-parallel learners (the describer-guesser recipe, workers.learners=2): one
learner group serves both policies, each rank holding a learner per policy, and every update of
each policy is the update one process makes on its whole mini-batch (slow: `pytest -m slow`)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from reinforge.distributed.learner_group import DriverLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.run import pipeline
from deadlines import PROCESS_START_S
from teacher_forcing import (
    RecordedStep, assert_replays, assert_same_batch, outcome, restore, single_twin, snapshot,
)
from test_several_policies import MICRO, config
from test_several_policies_parts import NAMES, rl_rows

pytestmark = pytest.mark.slow


def recording_run(tmp_path: Path, learners: int, monkeypatch) -> tuple[dict[str, list[RecordedStep]], dict[str, PolicyLearner]]:
    """A run of the two policies with `learners` learners: every optimizer step of each policy
    (state before, whole mini-batch, outcome), and a single-process twin of each policy's learner."""
    built: dict[str, PolicyLearner] = {}
    steps: dict[str, list[RecordedStep]] = {name: [] for name in NAMES}
    twins: dict[str, PolicyLearner] = {}
    original_build, cls = pipeline.build_learners, (PolicyLearner if learners == 1 else DriverLearner)
    original_step = cls.train_step

    def build_learners(cfg, models, env):
        made, group = original_build(cfg, models, env)
        built.update(made)
        return made, group

    def train_step(self, batch, loss_fn):
        (name,) = [n for n, learner in built.items() if learner is self]
        twins.setdefault(name, single_twin(self))
        before = snapshot(self)
        metrics = original_step(self, batch, loss_fn)
        steps[name].append(RecordedStep(before, copy.deepcopy(batch), loss_fn, outcome(self, metrics)))
        return metrics

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "build_learners", build_learners)
        patch.setattr(cls, "train_step", train_step)
        pipeline.run_training(config(
            *MICRO, f"workers.learners={learners}", f"workers.timeout_s={PROCESS_START_S:g}", "trainer.checkpoint_every=0",
            f"trainer.output_dir={tmp_path / str(learners)}",
        ))
    return steps, twins


def assert_replayed(reference: PolicyLearner, steps: list[RecordedStep], algo) -> None:
    """Each step is `reference`'s step from the same state on the same batch. A batch without a
    sampled token (a describer's forfeit ends the game before the guesser moves) has no gradient
    and no float-noise bounds: its step (AdamW's decay alone) must give the same bits."""
    assert_replays(reference, [s for s in steps if s.batch.loss_mask.any()], algo)
    for step in (s for s in steps if not s.batch.loss_mask.any()):
        restore(reference, step.before)
        reference.train_step(step.batch, step.loss_fn)
        weights = reference.model.state_dict()
        assert all(torch.equal(weights[k], v) for k, v in step.outcome.weights.items())


def test_two_policies_on_two_learners_each_take_the_single_process_step(tmp_path: Path, monkeypatch) -> None:
    one, _ = recording_run(tmp_path, 1, monkeypatch)
    two, twins = recording_run(tmp_path, 2, monkeypatch)
    algo = config(*MICRO).algo
    rows = rl_rows(tmp_path / "2")
    for name in NAMES:
        assert len(two[name]) == len(one[name]) >= 2, f"{name} trained in too few steps for the check"
        assert sum(bool(s.batch.loss_mask.any()) for s in two[name]) >= 2, f"{name} sampled too few tokens for the check"
        assert all(f"policy/{name}/loss" in r and f"policy/{name}/grad_norm" in r for r in rows)  # its own metrics

        # The first update: the same warm start and the same batch in both runs, so the same step.
        first, reference = two[name][0], twins[name]
        assert all(torch.equal(one[name][0].before.model[k], v) for k, v in first.before.model.items())
        assert_same_batch(one[name][0].batch, first.batch)
        assert_replayed(reference, [RecordedStep(first.before, first.batch, first.loss_fn, one[name][0].outcome)], algo)
        # Every update of the 2-learner run is the single learner's update of this policy from the
        # same state on the same batch: a follower that trained the other policy's copy on this
        # batch (or left its shard out) sends another gradient and fails here.
        assert_replayed(reference, two[name], algo)
        lr = first.before.optimizer["param_groups"][0]["lr"]
        start, end = first.before.model, two[name][-1].outcome.weights
        assert max((end[k] - start[k]).abs().max().item() for k in end) > lr / 2, f"{name}'s weights did not move"
    d, g = (two[name][-1].outcome.weights for name in NAMES)
    assert any(not torch.equal(d[k], g[k]) for k in d)  # two policies, two sets of weights
