"""Several policies under the async schedule: the producer holds a lane per policy, each loaded with
its own policy's snapshot of the same step, so every seat of a joint game is sampled by its owner's
versioned weights. Checked on the describer-guesser recipe's micro run: the sampled tokens' behaviour
log-probs are those of the owner's snapshot of the version the trajectory carries (and not the other
policy's), that version follows the lag rule (step s: the weights of step max(0, s-2) at
max_staleness=1), both policies train, two runs at one seed are the same run, and a run resumed from
its first checkpoint (the producer drained mid-flight) ends where the uninterrupted one did."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from reinforge.config import load_config
from reinforge.engines.base import Generation, SamplingParams
from reinforge.games.env import GameEnv
from reinforge.run.pipeline import run_training
from reinforge.tasks.task import Task
from reinforge.trainer import rl_loop, rollout_schedule
from run_records import copy_at_first_checkpoint, run_metrics
from snapshot_logprobs import gap_under, sampled_rows

RECIPE = str(Path(__file__).parents[2] / "recipes" / "describer-guesser.yaml")
NAMES = ("describer", "guesser")
LAG = 1  # max_staleness=1, whole groups: step s samples with the weights of step s-1-LAG
STEPS = 4
ASYNC_MICRO = [
    "model.preset=nano", "task.train_size=24", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=3", "rollout.group_size=4", f"trainer.steps={STEPS}", "eval.every=2", "trainer.checkpoint_every=2",
    "algo.epochs=1", "algo.mini_batches=1", "algo.entropy_coef=0.01",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    "trainer.schedule=async", f"trainer.max_staleness={LAG}", "algo.tis_cap=2.0",
]


def train(run_dir: Path) -> Path:
    run_training(load_config(RECIPE, [*ASYNC_MICRO, f"trainer.output_dir={run_dir}"]))
    return run_dir


def untimed_metrics(run_dir: Path) -> list[dict]:
    """run_metrics without the policies' own timings too (policy/<name>/time/...)."""
    return [{k: v for k, v in row.items() if "/time/" not in k} for row in run_metrics(run_dir)]


def weights(run_dir: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "final" / name / "model.safetensors")


class SnapshotLog:
    """Every snapshot the schedule takes (at its start and at each publication), by policy and
    version, and the step each batch was collected for."""

    def __init__(self):
        self.states: dict[tuple[str, int], dict] = {}
        self.published: dict[str, list[int]] = {name: [] for name in NAMES}  # versions at steps 0, 1, 2, ...
        self.names: dict[int, str] = {}  # id(learner) -> its policy
        self.step = 0

    def snapshots(self, take):
        def recording(learner):
            taken = take(learner)
            assert set(taken) == set(NAMES), "one snapshot per policy, taken together"
            for name, own in learner.items():
                self.names[id(own)] = name
                self.states[(name, own.version)] = taken[name][1]
                self.published[name].append(own.version)
            return taken
        return recording


def test_two_policies_sample_async_with_their_own_snapshots_reproducibly_and_resume_exactly(tmp_path: Path, monkeypatch) -> None:
    log = SnapshotLog()
    checked: dict[str, list[int]] = {name: [] for name in NAMES}  # steps at which each policy's seats were checked
    sampled = dict.fromkeys(NAMES, 0)  # how many of its steps had sampled tokens to check
    discriminated = []
    monkeypatch.setattr(rollout_schedule, "versioned_snapshots", log.snapshots(rollout_schedule.versioned_snapshots))
    collect = rollout_schedule.AsyncSchedule.collect

    def collect_step(self, step):
        log.step = step
        return collect(self, step)

    monkeypatch.setattr(rollout_schedule.AsyncSchedule, "collect", collect_step)
    prepare = rl_loop.prepare_batch

    def check_sampler(trajectories, kl, estimator, reward_weights, pad, learner, *rest):
        name = log.names[id(learner)]
        other = next(n for n in NAMES if n != name)
        wanted = log.published[name][max(0, log.step - 1 - LAG)]  # the lag rule, on the policy's own versions
        assert {t.policy_version for t in trajectories} == {wanted}, f"step {log.step}: {name}'s seats"
        assert 0 <= learner.version - wanted <= LAG, f"step {log.step}: {name} trains on versions too old"  # 1 update per step
        checked[name].append(log.step)
        rows = sampled_rows(trajectories)
        if not rows:  # its seats never got to move (the partner forfeited first): nothing sampled
            return prepare(trajectories, kl, estimator, reward_weights, pad, learner, *rest)
        own_gap, bound = gap_under(learner, rows, pad, log.states[(name, wanted)])
        assert own_gap <= bound, f"step {log.step}: {name}'s seats were not sampled by its own snapshot"
        if (other, wanted) in log.states:  # the other policy's weights of the same version would not have sampled them
            discriminated.append(gap_under(learner, rows, pad, log.states[(other, wanted)])[0] > bound)
        sampled[name] += 1
        return prepare(trajectories, kl, estimator, reward_weights, pad, learner, *rest)

    monkeypatch.setattr(rl_loop, "prepare_batch", check_sampler)
    full = train(tmp_path / "full")
    monkeypatch.undo()

    assert all(len(set(steps)) >= STEPS - 1 for steps in checked.values()), checked  # both policies trained most steps
    assert all(sampled.values()), sampled
    assert discriminated and all(discriminated), "the two policies' snapshots would sample alike: the check proves nothing"
    rows = [r for r in run_metrics(full) if r["stage"] == "rl"]
    assert len(rows) == STEPS
    for name in NAMES:
        assert all(r[f"policy/{name}/staleness_max"] <= LAG for r in rows if f"policy/{name}/staleness_max" in r)
        assert any(r.get(f"policy/{name}/staleness_max") == LAG for r in rows), f"{name} never sampled ahead"
        warm = load_file(full / "warm_start" / name / "model.safetensors")
        assert any(not torch.equal(warm[k], v) for k, v in weights(full, name).items()), f"{name} was not trained"

    again = train(tmp_path / "again")  # the same seed, unobserved: the same run, whatever the threads' timing
    assert untimed_metrics(again) == untimed_metrics(full)
    for name in NAMES:
        a, b = weights(full, name), weights(again, name)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: two runs at one seed differ"

    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(full, copy))), resume=True)
    assert run_metrics(copy) == run_metrics(full)
    for name in NAMES:
        a, b = weights(full, name), weights(copy, name)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: resumed weights differ"


class Forfeiting:
    """Answers every turn with a word that is no move, tagged with its own policy version."""

    def __init__(self, stop_id: int, version: int):
        self.stop_id, self.policy_version = stop_id, version

    def generate(self, prompts, params, seed=None):
        return [Generation([self.stop_id], [-0.1], "stop", self.policy_version) for _ in prompts]


def test_a_seat_that_never_moved_carries_its_own_policys_version(tokenizer) -> None:
    """The describer forfeits before the guesser moves: the guesser's empty trajectory is of the guesser's
    version (5), not the oldest version that sampled the rollout (the describer's 3, which would make it
    read 2 versions stale: a StalenessError under either schedule)."""
    env = GameEnv(tokenizer, max_turns=4)
    meta = {"game": "describer_guesser", "seats": list(NAMES), "policies": list(NAMES),
            "game_seed": 3, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "joint", "demo_seat": 0}
    task = Task(id="dg", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)
    engines = {"describer": Forfeiting(env.chat.end_of_turn_id, 3), "guesser": Forfeiting(env.chat.end_of_turn_id, 5)}
    trajectories = env.run_groups(engines, [task], 4, SamplingParams(4, stop_token_ids=env.stop_token_ids), seed=0)
    guesser = [t for t in trajectories if t.agent == "guesser"]
    assert guesser and not any(any(t.loss_mask) for t in guesser)  # it never got to move
    assert {t.policy_version for t in guesser} == {5}
    assert {t.policy_version for t in trajectories if t.agent == "describer"} == {3}
