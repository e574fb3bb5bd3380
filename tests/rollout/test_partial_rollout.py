"""Partial rollouts with a scripted engine: what is resumed, with which weights, and the tags.

The scripted engine writes each token as `100 + version` (so a token says which weights sampled
it) and ends a row when it holds the length its task asks for, one token per row per tick, so
which rows finish first, and where a round stops, is known in advance.
"""

from __future__ import annotations

import pytest
import torch

from reinforge.engines.base import Generation, SamplingParams
from reinforge.envs.base import StepResult
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.partial import PartialEpisode, PartialGroup, group_trajectories, sample_round
from reinforge.tasks.task import Task
from reinforge.trainer.partial_collect import PartialCollector
from reinforge.trainer.rollout_schedule import staleness_metrics
from reinforge.tasks.task_sampler import TaskSampler

MAX_NEW = 12
PARAMS = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0)


class ScriptedEngine:
    """Row i wants `prompt[0]` tokens in all; it samples one per tick until it has them."""

    def __init__(self) -> None:
        self.policy_version = 0
        self.calls: list[dict] = []

    def sync_weights(self, version: int) -> None:
        self.policy_version = version

    def generate(self, prompts, params, seed=None, budgets=None, stop_when=None) -> list[Generation]:
        budgets = budgets or [params.max_new_tokens] * len(prompts)
        # A prompt is [wanted length, tokens sampled earlier...]
        remaining = [max(0, p[0] - (len(p) - 1)) for p in prompts]
        ends = [min(r, b) for r, b in zip(remaining, budgets)]
        finished = torch.zeros(len(prompts), dtype=torch.bool)
        horizon = max(ends)
        aborted_at = None
        for tick in range(1, horizon + 1):
            newly = [i for i, end in enumerate(ends) if end == tick]
            if newly:
                finished[newly] = True
                if stop_when is not None and not finished.all() and stop_when(finished.clone()):
                    aborted_at = tick
                    break
        self.calls.append({"rows": len(prompts), "aborted_at": aborted_at, "version": self.policy_version})
        out = []
        for i, end in enumerate(ends):
            n = end if aborted_at is None or finished[i] else aborted_at
            reason = "aborted" if n < end else ("stop" if remaining[i] <= budgets[i] else "length")
            token = 100 + self.policy_version
            out.append(Generation([token] * n, [-0.01 * (self.policy_version + 1)] * n, reason, self.policy_version))
        return out


class ScriptedEnv:
    max_turns = 1
    stop_token_ids = ()

    class _Episode:
        def reset(self, task: Task) -> list[int]:
            return [task.metadata["length"]]

        def step(self, text: str, finish_reason: str) -> StepResult:
            return StepResult(done=True, info={"finish_reason": finish_reason})

    def episode(self):
        return self._Episode()

    def decode_response(self, token_ids: list[int]) -> str:
        return " ".join(map(str, token_ids))


def task(i: int, length: int) -> Task:
    return Task(id=f"t{i}", prompt=f"p{i}", answer="", metadata={"length": length})


def scorer() -> RewardScorer:
    return RewardScorer([NamedReward("length", lambda t, traj: float(len(traj.response_text)), 1.0)], cache=False, isolation="thread")


def test_a_round_stops_once_enough_groups_are_complete_and_keeps_the_rest() -> None:
    engine = ScriptedEngine()
    groups = [
        PartialGroup(task(i, n), i, [n], [PartialEpisode() for _ in range(2)]) for i, n in enumerate([3, 9, 5, 11])
    ]
    stats = sample_round(engine, groups, PARAMS, seed=0, weights_index=0, need=2, must_finish=[False] * 4)
    assert engine.calls[0]["aborted_at"] == 5  # the second-shortest group (5 tokens) completes the pair
    assert [g.complete for g in groups] == [True, False, True, False]
    assert [len(g.episodes[0].token_ids) for g in groups] == [3, 5, 5, 5]
    assert stats.aborted == 4 and stats.resumed == 0
    # A must-finish group keeps the round going until it is complete too.
    engine.sync_weights(1)
    sample_round(engine, groups, PARAMS, seed=0, weights_index=1, need=1, must_finish=[False, False, False, True])
    assert engine.calls[1]["aborted_at"] is None  # group 3 (11 tokens) is the last to finish
    assert all(g.complete for g in groups)
    assert groups[3].episodes[0].versions == [0] * 5 + [1] * 6
    assert groups[3].episodes[0].rounds == 2


@pytest.mark.parametrize("max_staleness", [1, 2])
def test_resumed_episodes_carry_correct_version_tags_and_never_exceed_the_bound(max_staleness: int) -> None:
    lengths = [2, 11, 3, 4, 12, 2, 9, 3, 3, 10, 5, 2, 8, 2, 12, 3] * 2
    tasks = [task(i, n) for i, n in enumerate(lengths)]
    engine, env = ScriptedEngine(), ScriptedEnv()
    sampler = TaskSampler(tasks, seed=0)
    collector = PartialCollector(env, scorer(), sampler, prompts=2, group_size=3, params=PARAMS,
                                 overprovision=2.0, max_staleness=max_staleness, seed=0)
    resumed_seen = 0
    for step in range(1, 13):
        engine.sync_weights(step - 1)  # sync schedule: step s samples with the weights of step s-1
        collected, metrics = collector.collect(engine, step, weights_index=step - 1)
        trajectories = collected.trajectories
        assert len(trajectories) == 2 * 3
        assert sorted({t.group_id for t in trajectories}) == [0, 1]
        for t in trajectories:
            wanted = tasks[int(t.task_id[1:])].metadata["length"]
            sampled = t.token_ids[t.prompt_length:]
            versions = t.token_versions[t.prompt_length:]
            assert t.token_versions[: t.prompt_length] == [-1] * t.prompt_length
            # Each token's tag is the version that really sampled it (the scripted token says so).
            assert versions == [token - 100 for token in sampled]
            assert versions == sorted(versions)  # resumed with newer weights, never older
            assert t.behaviour_logprobs[t.prompt_length:] == [-0.01 * (v + 1) for v in versions]
            assert t.policy_version == versions[0] == min(versions)
            assert len(sampled) == min(wanted, MAX_NEW)
            assert t.finish_reason == ("stop" if wanted <= MAX_NEW else "length")
            assert (step - 1) - t.policy_version <= max_staleness
            resumed_seen += len(set(versions)) > 1
        # The loop's own check, on every trajectory (1 optimizer step per RL step here).
        assert staleness_metrics(trajectories, step - 1, 1, max_staleness)["staleness_max"] <= max_staleness
        assert metrics["partial_carried_groups"] == len(collector.pool)
    assert resumed_seen > 0, "the setup never resumed an episode"


def test_pool_state_round_trips() -> None:
    tasks = [task(i, n) for i, n in enumerate([2, 11, 3, 12, 4, 9])]
    make = lambda: PartialCollector(ScriptedEnv(), scorer(), TaskSampler(tasks, seed=0), 2, 2, PARAMS, 2.0, 1, seed=0)
    a, engine = make(), ScriptedEngine()
    a.collect(engine, 1, 0)
    b = make()
    b.sampler.load_state_dict(a.sampler.state_dict())
    b.load_state_dict(a.state_dict())
    engine.sync_weights(1)
    out_a = [t.token_ids for t in a.collect(engine, 2, 1)[0].trajectories]
    out_b = [t.token_ids for t in b.collect(engine, 2, 1)[0].trajectories]
    assert out_a == out_b


def test_group_trajectories_refuses_an_incomplete_group() -> None:
    group = PartialGroup(task(0, 3), 0, [3], [PartialEpisode()])
    with pytest.raises(ValueError, match="not complete"):
        group_trajectories(ScriptedEnv(), group, 0)
