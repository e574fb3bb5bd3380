"""Data-parallel learner: 2 gloo ranks on CPU make the same update as one process on the whole batch."""

from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from reinforge.config import AlgoConfig
from reinforge.distributed.ddp import DataParallelPolicyLearner, free_port, init_distributed, shard_rows
from reinforge.distributed.learner_group import DriverLearner, FollowerSpec, LearnerGroup
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer
from reinforge.rollout.trajectory import Trajectory
from reinforge.learner.policy_objective import make_policy_objective
from deadlines import PROCESS_START_S
from teacher_forcing import (
    RecordedStep, assert_replays, assert_same_batch, assert_steps_agree, metric_bounds, outcome, recorded_step, restore, single_twin,
    snapshot,
)

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "constant")
MAX_RESPONSE = 8


def make_tokenizer():
    rng = random.Random(0)
    return train_tokenizer([f"{rng.randrange(1000)}+{rng.randrange(1000)}" for _ in range(200)])


def make_batch(vocab: int, pad: int):
    """9 ragged trajectories (odd, so the two shards differ in size) with random tokens and advantages."""
    g = torch.Generator().manual_seed(0)
    trajectories = []
    for i in range(9):
        prompt = torch.randint(3, vocab, (2 + i % 4,), generator=g).tolist()
        sampled = torch.randint(3, vocab, (1 + (i * 5) % MAX_RESPONSE,), generator=g).tolist()
        logprobs = (-torch.rand(len(sampled), generator=g) * 4).tolist()
        trajectories.append(
            Trajectory(
                task_id=f"t{i}", group_id=i // 3, token_ids=prompt + sampled,
                loss_mask=[False] * len(prompt) + [True] * len(sampled),
                behaviour_logprobs=[0.0] * len(prompt) + logprobs,
                turn_spans=[(len(prompt), len(prompt) + len(sampled))], prompt_length=len(prompt),
                response_text="", policy_version=0, finish_reason="length",
            )
        )
    batch = collate(trajectories, torch.randn(9, generator=g), pad)
    # The engine's log-probs handed to the update, as prepare_batch does with one optimizer step:
    # the loss reports the log-prob gap, whose _max / _min metrics the ranks reduce by max / min.
    batch.behaviour_logprobs = batch.old_logprobs
    return batch


LR = 1e-3


def algo_for(agg: str) -> AlgoConfig:
    return AlgoConfig(loss_agg=agg, entropy_coef=0.01)


def single_learner(model) -> PolicyLearner:
    return PolicyLearner(model, LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)


class ScaledShardLearner(DataParallelPolicyLearner):
    """A broken data-parallel learner for the control test: the last rank's shard gradient is
    scaled before the all-reduce (0: the shard is dropped, 2: it counts twice)."""

    shard_scale = 1.0

    def reduce_gradients(self) -> None:
        if self.rank == self.world_size - 1:
            for p in self.model.parameters():
                p.grad.mul_(self.shard_scale)
        super().reduce_gradients()


def train_ranks(rank: int, world_size: int, aggregations=AGGREGATIONS, steps: int = 2, shard_scale: float = 1.0):
    """`steps` optimizer steps of a fresh nano model on this rank's shard, per aggregation mode:
    each step recorded (state before, whole batch, gradients, weights and metrics after)."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    out = {}
    for agg in aggregations:
        model = build_tiny_llama(tokenizer, "nano", seed=0)
        if shard_scale == 1:
            learner = DataParallelPolicyLearner(model, LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
        else:
            learner = ScaledShardLearner(model, LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
            learner.shard_scale = shard_scale
        loss_fn = make_policy_objective(algo_for(agg))
        shard = batch.select(shard_rows(len(batch), rank, world_size))
        out[agg] = [recorded_step(learner, batch, loss_fn, shard) for _ in range(steps)]
    return out


def rank_main(rank: int, world_size: int, port: int, *args):
    # Rank 0's rendezvous waits for the spawned rank 1 to import everything: a process start.
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        return train_ranks(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def child_main(index: int, world_size: int, port: int, *args) -> None:
    rank_main(index + 1, world_size, port, *args)


def two_ranks(*args):
    """Rank 0 is this process, rank 1 a spawned one (a second spawned rank would only add its imports);
    returns rank 0's recorded steps."""
    port = free_port()
    child = mp.spawn(child_main, args=(2, port, *args), nprocs=1, join=False)
    try:
        parallel = rank_main(0, 2, port, *args)
        assert child.join(timeout=PROCESS_START_S), "rank 1 did not finish"
    finally:
        for process in child.processes:
            if process.is_alive():
                process.kill()
    return parallel


def test_two_gloo_ranks_match_one_process() -> None:
    """Every step of the 2 ranks is the step one process takes on the whole batch from the same
    state (tests/teacher_forcing.py: gradients, AdamW step and metrics within float-noise bounds)."""
    parallel = two_ranks()
    tokenizer = make_tokenizer()
    initial = build_tiny_llama(tokenizer, "nano", seed=0).state_dict()
    for agg in AGGREGATIONS:
        steps = parallel[agg]
        assert_replays(single_learner(build_tiny_llama(tokenizer, "nano", seed=0)), steps, algo_for(agg))
        assert all(torch.equal(steps[0].before.model[k], initial[k]) for k in initial)  # rank 0 started from the seed
        assert steps[1].before.optimizer["state"], "the second step starts from AdamW moments"
        moved = max((steps[-1].outcome.weights[k] - initial[k]).abs().max().item() for k in steps[-1].outcome.weights)
        assert moved > LR / 2  # Adam moves an entry with |g| >> eps by ~lr per step: the steps did something


def test_the_step_check_fails_when_a_shard_gradient_is_dropped() -> None:
    """Control: the bounds above are not vacuous. A shard missing from the all-reduce fails the
    gradient check of the very first step (so does one counted twice: shard_scale=2)."""
    parallel = two_ranks(("token_mean",), 1, 0.0)
    reference = single_learner(build_tiny_llama(make_tokenizer(), "nano", seed=0))
    with pytest.raises(AssertionError, match="step 1: gradient of"):
        assert_replays(reference, parallel["token_mean"], algo_for("token_mean"))


def test_shard_rows_cover_the_batch_in_order() -> None:
    shards = [shard_rows(9, r, 2) for r in range(2)]
    assert shards == [slice(0, 5), slice(5, 9)]
    assert [shard_rows(2, r, 3) for r in range(3)] == [slice(0, 1), slice(1, 2), slice(2, 2)]


def test_learner_group_driver_matches_one_process_from_a_resumed_state() -> None:
    """`reinforge train` with workers.learners=2: rank 0 (this process) drives a spawned follower.
    The driver is handed a state loaded after it was built (as a resumed run does: weights and
    AdamW moments of one earlier step), which must reach the follower before its first update, or
    the follower's shard gradient and its own AdamW step would differ from rank 0's."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = AlgoConfig(entropy_coef=0.01)
    loss_fn = make_policy_objective(algo)
    kwargs = dict(lr=1e-3, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)

    def resumed() -> PolicyLearner:
        learner = PolicyLearner(build_tiny_llama(tokenizer, "nano", seed=0), **kwargs)
        learner.train_step(batch, loss_fn)
        return learner

    start = resumed()
    other = build_tiny_llama(tokenizer, "nano", seed=1)  # what the group starts from: must be overwritten
    group = LearnerGroup(2, FollowerSpec(other.config, kwargs, algo, threads=1, timeout_s=PROCESS_START_S), other)
    try:
        driver = group.learner
        driver.model.load_state_dict(start.model.state_dict())
        driver.optimizer.load_state_dict(start.optimizer.state_dict())
        driver.version = start.version
        steps = [recorded_step(driver, batch, loss_fn) for _ in range(2)]
    finally:
        group.close()
    assert [p.exitcode for p in group.followers] == [0]
    assert driver.version == 3
    assert all(torch.equal(steps[0].before.model[k], v) for k, v in start.model.state_dict().items())
    # Each of the group's steps is the one a single learner takes from the same state; a follower
    # that trained from its own (seed 1) weights or without the resumed moments would send another
    # shard gradient (step 1, or step 2 once its weights drifted) and fail the gradient check.
    assert_replays(resumed(), steps, algo)


def test_learner_group_needs_two_learners() -> None:
    with pytest.raises(ValueError, match="at least 2 learners"):
        LearnerGroup(1, None, None)


def recording(cls, into: list[RecordedStep], twins: list[PolicyLearner]):
    """`cls.train_step` that records every step (and keeps one single-process twin of the learner)."""
    original = cls.train_step

    def train_step(self, batch, loss_fn):
        if not twins:
            twins.append(single_twin(self))
        before = snapshot(self)
        metrics = original(self, batch, loss_fn)
        into.append(RecordedStep(before, copy.deepcopy(batch), loss_fn, outcome(self, metrics)))
        return metrics

    return train_step


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_train_with_two_learners_matches_one(tmp_path, monkeypatch, recorded) -> None:
    """The whole loop (`run_training`) with workers.learners=2 against 1. Both start from the same
    weights and sample the same first batch, so their first steps agree within float-noise bounds.
    After that their weights differ by rounding, which Adam can amplify to ~lr per entry and the
    next rollouts may sample differently (tests/teacher_forcing.py): so every step of the 2-learner
    run is checked against a single learner's step from the same state on the same batch, and
    rewards must be identical wherever the two runs sampled the same tokens."""
    from reinforge.config import load_config
    from reinforge.run.pipeline import run_sft_stage, run_training

    tiny = [
        "model.preset=nano", "task.train_size=100", "task.eval_size=8", "trainer.steps=3",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8", "eval.every=100",
        "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
        "telemetry.wandb='off'", f"workers.timeout_s={PROCESS_START_S:g}",
    ]
    sft = ["sft.steps=150", "sft.lr=0.003", "sft.warmup_steps=50"]  # enough that rewards differ within groups
    warm = run_sft_stage(load_config("default", [*tiny, *sft, f"trainer.output_dir={tmp_path / 'sft'}"]))
    steps: dict[int, list[RecordedStep]] = {1: [], 2: []}
    twins: list[PolicyLearner] = []
    for learners, cls in ((1, PolicyLearner), (2, DriverLearner)):
        overrides = [f"model.path={warm}", "sft.steps=0", f"workers.learners={learners}", f"trainer.output_dir={tmp_path / str(learners)}"]
        cfg = load_config("default", [*tiny, *overrides])
        with monkeypatch.context() as patch:
            patch.setattr(cls, "train_step", recording(cls, steps[learners], twins if learners == 2 else []))
            run_training(cfg)
    one, two = steps[1], steps[2]
    assert len(one) == len(two) >= 3

    # Rewards are a function of the sampled tokens: the same tokens, the same rewards.
    batches = len(recorded) // 2
    assert batches >= 3 and len(recorded) == 2 * batches
    same_samples = 0
    for (_, a), (_, b) in zip(recorded[:batches], recorded[batches:]):
        assert [t.task_id for t in a] == [t.task_id for t in b]
        for ta, tb in zip(a, b):
            if ta.token_ids == tb.token_ids:
                same_samples += 1
                assert ta.reward == tb.reward and ta.rewards == tb.rewards
    # The first batch comes from the same weights in the same process: the same bits.
    assert [t.token_ids for t in recorded[0][1]] == [t.token_ids for t in recorded[batches][1]]
    assert len({t.reward for t in recorded[0][1]}) > 1, "rewards differ within the batch: the steps have signal"

    # The first step: same state, same batch; the two runs agree within float-noise bounds.
    reference, algo = twins[0], cfg.algo
    assert all(torch.equal(one[0].before.model[k], v) for k, v in two[0].before.model.items())
    assert_same_batch(one[0].batch, two[0].batch)
    restore(reference, two[0].before)
    bounds = metric_bounds(reference, two[0].batch, algo)
    assert_steps_agree(reference, two[0].before, two[0].batch, bounds, two[0].outcome, one[0].outcome, "first step, 1 vs 2 learners")
    # Every step of the 2-learner run is the single learner's step from the same state.
    assert_replays(reference, two, algo)
    lr = two[0].before.optimizer["param_groups"][0]["lr"]
    start, end = two[0].before.model, two[-1].outcome.weights
    assert max((end[k] - start[k]).abs().max().item() for k in end) > lr / 2  # RL moved the weights


def test_a_dead_learner_follower_stops_the_update_instead_of_hanging() -> None:
    """Kill the follower between two updates: rank 0's next collective fails (the connection is
    gone) or times out (workers.timeout_s, 20 s here); either way train_step raises, naming the dead
    rank, and does not hang.
    The follower's start has a deadline of its own: on a loaded machine its imports alone took > 20 s."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = AlgoConfig()
    kwargs = dict(lr=1e-3, micro_batch_size=4, max_response_tokens=MAX_RESPONSE)
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    group = LearnerGroup(2, FollowerSpec(model.config, kwargs, algo, threads=1, timeout_s=20, startup_timeout_s=PROCESS_START_S), model)
    try:
        group.learner.train_step(batch, make_policy_objective(algo))
        follower = group.followers[0]
        follower.kill()
        follower.join(timeout=10)
        # gloo: connection closed by peer (or its timeout); the group names the follower whose death broke it
        with pytest.raises(RuntimeError, match=r"data-parallel learner rank 1 \(exit code -9\) died; the learner group stopped"):
            group.learner.train_step(batch, make_policy_objective(algo))
    finally:
        group._kill()
        dist.destroy_process_group()


def test_a_followers_start_has_a_deadline_of_its_own() -> None:
    """The start (a fresh interpreter's imports, the objective, the model) is timed apart from the
    collectives, so a tight step deadline does not fail a slow start, and a start that never ends
    still stops: here a start-up deadline no interpreter meets, under a generous step deadline."""
    tokenizer = make_tokenizer()
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    kwargs = dict(lr=1e-3, micro_batch_size=4, max_response_tokens=MAX_RESPONSE)
    assert FollowerSpec(model.config, kwargs, AlgoConfig(), threads=1, timeout_s=20).start_deadline_s == 20  # the default
    spec = FollowerSpec(model.config, kwargs, AlgoConfig(), threads=1, timeout_s=PROCESS_START_S, startup_timeout_s=0.01)
    with pytest.raises(RuntimeError, match=r"rank 1 did not start within a start-up deadline of 0\.01 s"):
        LearnerGroup(2, spec, model)
    assert not dist.is_initialized()
