"""DAPO dynamic sampling in `collect_groups`, with a real nano engine and a scripted reward.

The reward gives 1.0 to every sample of a "solved" task (a zero-variance group) and, for other
tasks, the parity of the sampled token ids (a reward that varies within a group of near-uniform
samples). A recording scorer keeps every round's trajectories and metrics so the test can see
what was sampled, not only what was kept.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from reinforge.config import PromptValueConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.tasks.task import Task
from reinforge.trainer.collect import collect_groups, informative_groups
from reinforge.tasks.task_sampler import TaskSampler
from reinforge.values.curriculum_sampler import CurriculumSampler

TEXTS = ["1+2=", "35+7=", "123+456=", "9=", "80+801=", "4+4="]
PROMPTS, GROUP = 4, 8
# Any 4 of these 6 tasks include at least one of the 3 solved ones: round 1 always has a
# zero-variance group, so dynamic sampling must go to a second round.
SOLVED = {"t0", "t1", "t2"}


def make_tasks() -> list[Task]:
    return [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(TEXTS)]


class ScriptedReward:
    def __init__(self, solved: set[str]):
        self.solved = solved

    def __call__(self, task, trajectory) -> float:
        if task.id in self.solved:
            return 1.0
        return float(sum(trajectory.token_ids[trajectory.prompt_length :]) % 2)


class RecordingScorer(RewardScorer):
    """A RewardScorer that remembers each call's trajectories and returned metrics (one per round)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list, dict[str, float]]] = []

    def score(self, tasks, trajectories):
        metrics = super().score(tasks, trajectories)
        self.calls.append((list(trajectories), dict(metrics)))
        return metrics


@pytest.fixture
def make_scorer():
    scorers = []

    def build(solved: set[str]) -> RecordingScorer:
        scorer = RecordingScorer([NamedReward("correct", ScriptedReward(solved), 1.0)], workers=2, isolation="thread")
        scorers.append(scorer)
        return scorer

    yield build
    for scorer in scorers:
        scorer.close()


@pytest.fixture(scope="module")
def setup(tokenizer, nano_model):
    engine = TorchEngine(nano_model, tokenizer.pad_token_id)
    env = SingleTurnEnv(tokenizer, "raw")
    params = SamplingParams(max_new_tokens=4, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    return engine, env, params


def collect(setup, scorer, dynamic: bool, max_rounds: int, seed: int = 3, sampler_seed: int = 0):
    engine, env, params = setup
    sampler = TaskSampler(make_tasks(), seed=sampler_seed)
    return collect_groups(
        engine, env, scorer, sampler, PROMPTS, GROUP, params, seed=seed, dynamic_sampling=dynamic, max_rounds=max_rounds
    )


def groups_of(trajectories) -> dict[int, list]:
    groups = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t)
    return groups


def is_informative(group) -> bool:
    return len({t.reward for t in group}) > 1


def test_without_dynamic_sampling_every_group_comes_back(setup, make_scorer) -> None:
    scorer = make_scorer(SOLVED)
    out = collect(setup, scorer, dynamic=False, max_rounds=3)
    assert out.rounds == 1 and len(scorer.calls) == 1
    assert out.trajectories == scorer.calls[0][0]
    assert len(out.trajectories) == PROMPTS * GROUP
    groups = groups_of(out.trajectories)
    assert len(groups) == PROMPTS and all(len(g) == GROUP for g in groups.values())
    # The scripted reward does what the other tests rely on: solved groups are constant, the
    # others are informative.
    solved = [g for g in groups.values() if g[0].task_id in SOLVED]
    unsolved = [g for g in groups.values() if g[0].task_id not in SOLVED]
    assert solved and unsolved
    assert all(not is_informative(g) for g in solved)
    assert all(is_informative(g) for g in unsolved)
    assert out.reward_metrics["sampling_rounds"] == 1.0
    assert out.reward_metrics["train_groups"] == float(PROMPTS)


@pytest.mark.parametrize("max_rounds", [2, 3, 5])
def test_dynamic_sampling_keeps_only_informative_groups(setup, make_scorer, max_rounds) -> None:
    scorer = make_scorer(SOLVED)
    out = collect(setup, scorer, dynamic=True, max_rounds=max_rounds)

    first_round = groups_of(scorer.calls[0][0])
    assert any(not is_informative(g) for g in first_round.values())  # round 1 had a constant group
    assert out.rounds > 1
    assert out.rounds <= max_rounds
    assert out.rounds == len(scorer.calls)
    assert out.reward_metrics["sampling_rounds"] == float(out.rounds)

    groups = groups_of(out.trajectories)
    assert groups and all(is_informative(g) for g in groups.values())
    assert all(g[0].task_id not in SOLVED for g in groups.values())
    assert all(len(g) == GROUP and len({t.task_id for t in g}) == 1 for g in groups.values())
    assert len(out.trajectories) <= PROMPTS * GROUP
    assert out.reward_metrics["train_groups"] == float(len(groups))
    if out.rounds < max_rounds:  # stopped early: because the batch was full
        assert len(groups) == PROMPTS
    # every informative group sampled (up to the batch size) was kept
    sampled_informative = sum(len(informative_groups(trajs)) for trajs, _ in scorer.calls)
    assert len(groups) == min(PROMPTS, sampled_informative)

    # group ids never repeat across rounds: each id names one task's group of one round
    ids_per_round = [{t.group_id for t in trajs} for trajs, _ in scorer.calls]
    assert sum(len(ids) for ids in ids_per_round) == len(set().union(*ids_per_round))
    for trajs, _ in scorer.calls:
        for g in groups_of(trajs).values():
            assert len(g) == GROUP and len({t.task_id for t in g}) == 1
    assert all(t.task_id in out.tasks for t in out.trajectories)

    # the reward curve reports the policy's first round, before any filtering
    first_metrics = scorer.calls[0][1]
    counts = ("sampling_rounds", "train_groups", "sampled_tokens", "sampled_zero_variance_group_frac")
    reported = {k: v for k, v in out.reward_metrics.items() if k not in counts}
    assert reported == first_metrics
    assert first_metrics["reward/correct/frac_nonzero"] > 0

    # every round's tokens and constant groups are counted, the dropped ones included
    all_sampled = [t for trajs, _ in scorer.calls for t in trajs]
    assert out.reward_metrics["sampled_tokens"] == sum(t.num_sampled_tokens for t in all_sampled)
    sampled_groups = sum(len(groups_of(trajs)) for trajs, _ in scorer.calls)
    constant = sampled_groups - sum(len(informative_groups(trajs)) for trajs, _ in scorer.calls)
    assert out.reward_metrics["sampled_zero_variance_group_frac"] == constant / sampled_groups


def test_dynamic_sampling_with_one_round_only_filters(setup, make_scorer) -> None:
    scorer = make_scorer(SOLVED)
    out = collect(setup, scorer, dynamic=True, max_rounds=1)
    assert out.rounds == 1 and len(scorer.calls) == 1
    expected = {g[0].group_id for g in informative_groups(scorer.calls[0][0])}
    assert expected and set(groups_of(out.trajectories)) == expected
    assert len(expected) < PROMPTS


def test_all_solved_returns_the_last_round_not_nothing(setup, make_scorer) -> None:
    every_task = {t.id for t in make_tasks()}
    scorer = make_scorer(every_task)
    out = collect(setup, scorer, dynamic=True, max_rounds=3)
    assert out.rounds == 3 and len(scorer.calls) == 3
    assert len(out.trajectories) == PROMPTS * GROUP
    assert out.trajectories == scorer.calls[-1][0]  # the last round's groups, zero advantages
    assert all(not is_informative(g) for g in groups_of(out.trajectories).values())
    assert out.reward_metrics["sampling_rounds"] == 3.0
    assert out.reward_metrics["reward"] == 1.0
    ids_per_round = [{t.group_id for t in trajs} for trajs, _ in scorer.calls]
    assert sum(len(ids) for ids in ids_per_round) == len(set().union(*ids_per_round)) == 3 * PROMPTS


class FailingOnEvenReward(ScriptedReward):
    """As ScriptedReward, but raises where task t4's parity reward would be 0: t4's group then
    looks informative (1.0 next to the fallback 0.0) while some of its samples have no reward."""

    def __call__(self, task, trajectory) -> float:
        value = super().__call__(task, trajectory)
        if task.id == "t4" and value == 0.0:
            raise ValueError("no reward for this one")
        return value


def test_a_group_with_a_failed_reward_is_not_kept_as_informative_when_failures_are_dropped(setup) -> None:
    scorer = RecordingScorer([NamedReward("correct", FailingOnEvenReward(SOLVED), 1.0)], workers=2, on_error="drop", isolation="thread")
    try:
        engine, env, params = setup
        out = collect_groups(engine, env, scorer, TaskSampler(make_tasks(), seed=0), PROMPTS, GROUP, params,
                             seed=3, dynamic_sampling=True, max_rounds=5)
    finally:
        scorer.close()
    sampled = [t for trajectories, _ in scorer.calls for t in trajectories]
    assert any(t.task_id == "t4" and t.reward_failures for t in sampled)  # t4 was drawn and failed
    assert not any(t.reward_failures for t in out.trajectories), "a group the loss will drop was kept"
    assert all(is_informative(g) for g in groups_of(out.trajectories).values())


def test_the_groups_dynamic_sampling_drops_come_back_and_train_the_prompt_value_model(setup, make_scorer) -> None:
    """A prompt-value model must learn from every group's outcome (reinforge.values.curriculum_sampler):
    `Collected.dropped` holds every scored group the step left out, and observing the kept and the
    dropped groups puts every drawn group's outcome into its buffer, the solved (all-equal) ones too."""
    engine, env, params = setup
    scorer = make_scorer(SOLVED)
    tasks = make_tasks()
    sampler = CurriculumSampler(
        tasks, seed=0, cfg=PromptValueConfig(enabled=True, updates_per_step=2),
        featurize=lambda batch: torch.tensor([[float(t.id[1:]), 1.0] for t in batch], dtype=torch.float64), embed_dim=2,
    )
    out = collect_groups(engine, env, scorer, sampler, PROMPTS, GROUP, params, seed=3, dynamic_sampling=True, max_rounds=3)
    sampled = groups_of([t for trajectories, _ in scorer.calls for t in trajectories])
    kept, dropped = groups_of(out.trajectories), groups_of(out.dropped)
    assert dropped and not set(kept) & set(dropped) and set(kept) | set(dropped) == set(sampled)
    assert any(g[0].task_id in SOLVED for g in dropped.values())  # the all-equal groups among them
    metrics = sampler.observe(out.trajectories + out.dropped, step=1)
    assert metrics["value/groups_observed"] == len(sampled) == len(sampler.value.buffer)
    assert not sampler.pending  # every prediction made before sampling met its outcome
    solved_rates = [rate for _, _, rate, _ in sampler.value.buffer if rate == 1.0]
    assert len(solved_rates) == sum(g[0].task_id in SOLVED for g in sampled.values())
