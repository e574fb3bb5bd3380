"""The curriculum sampler: PCL picks from its pool by prediction, the value model learns from the
step's groups, DUMP follows learnability, and a restored state draws exactly what the original does."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.config import PromptValueConfig
from reinforge.values.curriculum_sampler import CurriculumSampler, group_abs_advantages
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

TASKS = [Task(id=f"t{i}", prompt=f"{i}+0=", answer=str(i), metadata={"digits": 1 + i % 2}) for i in range(40)]


def featurize(tasks: list[Task]) -> torch.Tensor:
    """A fixed 3-d embedding per task: its index on a circle (what a policy's prompt states stand in for)."""
    angle = torch.tensor([int(t.id[1:]) / 40 * 6.283 for t in tasks], dtype=torch.float64)
    return torch.stack([angle.cos(), angle.sin(), torch.ones_like(angle)], dim=1)


def trajectories(tasks: list[Task], passes: dict[str, int], size: int = 4) -> list[Trajectory]:
    out = []
    for g, task in enumerate(tasks):
        for k in range(size):
            reward = 1.0 if k < passes[task.id] else 0.0
            out.append(Trajectory(
                task_id=task.id, group_id=g, token_ids=[1, 2], loss_mask=[False, True], behaviour_logprobs=[0.0, -1.0],
                turn_spans=[(1, 2)], prompt_length=1, response_text="x", policy_version=0, finish_reason="stop",
                rewards={"correct": reward}, reward=reward,
            ))
    return out


def sampler(**overrides) -> CurriculumSampler:
    cfg = PromptValueConfig(enabled=True, curriculum="pcl", pool_factor=4, updates_per_step=5, **overrides)
    return CurriculumSampler(TASKS, seed=0, cfg=cfg, featurize=featurize, embed_dim=3)


def step(s: CurriculumSampler) -> tuple[list[str], dict]:
    batch = s.next_batch(4)
    passes = {t.id: int(t.id[1:]) % 5 for t in TASKS}  # pass rates 0, .25, .5, .75, 1 by index
    metrics = s.observe(trajectories(batch, passes))
    return [t.id for t in batch], metrics


def test_pcl_samples_the_pool_members_predicted_nearest_the_target():
    s = sampler(target=0.3)
    batch = s.next_batch(4)
    pool_predictions = s.draw_metrics["value/pool_pred_mean"]
    assert len(batch) == 4 and len(s.pending) == 4
    chosen = torch.tensor([s.pending[t.id][0][2] for t in batch])
    assert s.draw_metrics["value/selected_pred_mean"] == pytest.approx(chosen.mean().item())
    assert isinstance(pool_predictions, float)


def test_observe_scores_predictions_and_trains_the_model():
    s = sampler()
    _, metrics = step(s)
    for key in ("value/brier", "value/brier_constant", "value/loss", "value/pass_rate"):
        assert key in metrics
    assert sum(v for k, v in metrics.items() if k.startswith("value/reliability/n_")) == 16
    assert len(s.value.buffer) == 4 and not s.pending
    assert s.reliability[:, 2].sum() == 16  # 4 groups x 4 samples counted in the reliability curve


def test_a_restored_sampler_draws_and_predicts_exactly_as_the_original():
    a = sampler()
    for _ in range(3):
        step(a)
    b = sampler()
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through a checkpoint: no shared tensors
    for _ in range(3):
        ids_a, metrics_a = step(a)
        ids_b, metrics_b = step(b)
        assert ids_a == ids_b
        timeless = lambda m: {k: v for k, v in m.items() if "seconds" not in k}  # noqa: E731
        assert timeless(metrics_a) == timeless(metrics_b)


def test_prior_for_the_v05_baseline_needs_a_prediction_per_sampled_task():
    s = sampler()
    batch = s.next_batch(4)
    prior = s.prompt_prior(trajectories(batch, dict.fromkeys([t.id for t in batch], 1)))
    assert prior["prompt_values"].shape == (16,) and prior["prior_test_z"] == 2.0
    assert torch.all(prior["prompt_value_var"] == 0.25)  # no result yet: the widest a pass rate's error can be
    stray = trajectories([Task(id="never-drawn", prompt="0+0=", answer="0")], {"never-drawn": 1})
    with pytest.raises(ValueError, match="no prediction was made before sampling task\\(s\\) \\['never-drawn'\\]"):
        s.prompt_prior(stray)


def test_dump_moves_to_the_distribution_with_the_larger_advantages():
    cfg = PromptValueConfig(curriculum="dump", dump_key="digits", dump_c=0.0, dump_temperature=0.05)
    s = CurriculumSampler(TASKS, seed=0, cfg=cfg, featurize=None, embed_dim=None)
    for _ in range(5):
        batch = s.next_batch(4)
        learnable = {g: (0.5 if t.metadata["digits"] == 2 else 0.0) for g, t in enumerate(batch)}
        metrics = s.observe(trajectories(batch, dict.fromkeys([t.id for t in batch], 2)), learnable)
    assert metrics["dump/prob/2"] > 0.99
    assert all(t.metadata["digits"] == 2 for t in s.next_batch(8))


def test_group_abs_advantages_per_sample_and_per_token():
    trajs = trajectories(TASKS[:2], {"t0": 1, "t1": 2}, size=2)
    assert group_abs_advantages(trajs, torch.tensor([0.5, -0.5, 0.0, 1.0]), torch.ones(4, 2, dtype=torch.bool)) == {0: 0.5, 1: 0.5}
    per_token = torch.tensor([[1.0, 3.0], [2.0, 0.0], [0.0, 0.0], [4.0, 4.0]])
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True]])
    assert group_abs_advantages(trajs, per_token, mask) == {0: 2.0, 1: 2.0}  # (2 + 2) / 2, (0 + 4) / 2


def test_a_plain_sampler_resumes_the_data_cursor_of_a_curriculum_checkpoint():
    # `--force` resume of a run with the prompt_value section switched off: the data cursor carries over.
    from reinforge.tasks.task_sampler import TaskSampler

    curriculum = CurriculumSampler(TASKS, seed=5, cfg=PromptValueConfig(), featurize=None, embed_dim=None)
    curriculum.next_batch(3)
    plain = TaskSampler(TASKS, seed=0)
    plain.load_state_dict(copy.deepcopy(curriculum.state_dict()))
    assert [t.id for t in plain.next_batch(6)] == [t.id for t in curriculum.next_batch(6)]
