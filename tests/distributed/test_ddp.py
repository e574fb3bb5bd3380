"""Data-parallel learner: 2 gloo ranks on CPU make the same update as one process on the whole batch."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from reinforge.config import AlgoConfig
from reinforge.distributed.ddp import DataParallelPolicyLearner, free_port, init_distributed, shard_rows
from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer
from reinforge.rollout.trajectory import Trajectory
from reinforge.trainer.policy_objective import make_policy_objective

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
    return collate(trajectories, torch.randn(9, generator=g), pad)


def train(learner_cls, rows, **extra):
    """Two optimizer steps of a fresh nano model, per aggregation mode; returns weights, grads, metrics."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    out = {}
    for agg in AGGREGATIONS:
        model = build_tiny_llama(tokenizer, "nano", seed=0)
        learner = learner_cls(model, 1e-3, micro_batch_size=2, max_response_tokens=MAX_RESPONSE, **extra)
        loss_fn = make_policy_objective(AlgoConfig(loss_agg=agg, entropy_coef=0.01))
        shard = batch.select(rows(len(batch)))
        metrics = [learner.train_step(shard, loss_fn) for _ in range(2)]
        out[agg] = (
            {k: v.clone() for k, v in model.state_dict().items()},
            {k: p.grad.clone() for k, p in model.named_parameters()},
            metrics,
        )
    return out


def rank_main(rank: int, world_size: int, port: int):
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=60)
    try:
        return train(DataParallelPolicyLearner, lambda n: shard_rows(n, rank, world_size))
    finally:
        dist.destroy_process_group()


def child_main(index: int, world_size: int, port: int) -> None:
    rank_main(index + 1, world_size, port)


def test_two_gloo_ranks_match_one_process() -> None:
    """Rank 0 is this process, rank 1 a spawned one (a second spawned rank would only add its imports)."""
    port = free_port()
    child = mp.spawn(child_main, args=(2, port), nprocs=1, join=False)
    try:
        parallel = rank_main(0, 2, port)
        assert child.join(timeout=60), "rank 1 did not finish"
    finally:
        for process in child.processes:
            if process.is_alive():
                process.kill()
    single = train(PolicyLearner, lambda n: slice(0, n))
    initial = build_tiny_llama(make_tokenizer(), "nano", seed=0).state_dict()
    for agg in AGGREGATIONS:
        (w1, g1, m1), (w2, g2, m2) = single[agg], parallel[agg]
        assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-5, agg
        assert max((w1[k] - initial[k]).abs().max().item() for k in w1) > 1e-4  # the steps did something
        for k in g1:
            torch.testing.assert_close(g2[k], g1[k], rtol=1e-4, atol=1e-7, msg=f"{agg} {k}")
        for step in range(2):
            assert m2[step].keys() == m1[step].keys()
            for key in m1[step]:
                assert m2[step][key] == pytest.approx(m1[step][key], rel=1e-4, abs=1e-6), (agg, step, key)


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

    single = resumed()
    single_metrics = [single.train_step(batch, loss_fn) for _ in range(2)]

    start = resumed()
    other = build_tiny_llama(tokenizer, "nano", seed=1)  # what the group starts from: must be overwritten
    group = LearnerGroup(2, FollowerSpec(other.config, kwargs, algo, threads=1, timeout_s=60), other)
    try:
        driver = group.learner
        driver.model.load_state_dict(start.model.state_dict())
        driver.optimizer.load_state_dict(start.optimizer.state_dict())
        driver.version = start.version
        group_metrics = [driver.train_step(batch, loss_fn) for _ in range(2)]
    finally:
        group.close()
    assert [p.exitcode for p in group.followers] == [0]
    w1, w2 = single.model.state_dict(), driver.model.state_dict()
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-5
    assert driver.version == single.version == 3
    for m1, m2 in zip(single_metrics, group_metrics):
        assert m2["loss"] == pytest.approx(m1["loss"], rel=1e-4, abs=1e-6)


def test_learner_group_needs_two_learners() -> None:
    with pytest.raises(ValueError, match="at least 2 learners"):
        LearnerGroup(1, None, None)


def test_train_with_two_learners_matches_one(tmp_path) -> None:
    """The whole loop (`run_training`) with workers.learners=2 against 1: same rewards, same weights
    up to float summation order."""
    from safetensors.torch import load_file

    from reinforge.config import load_config
    from reinforge.trainer.pipeline import run_sft_stage, run_training

    tiny = [
        "model.preset=nano", "task.train_size=100", "task.eval_size=8", "trainer.steps=3",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8", "eval.every=100",
        "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
        "telemetry.wandb='off'", "workers.timeout_s=60",
    ]
    sft = ["sft.steps=150", "sft.lr=0.003", "sft.warmup_steps=50"]  # enough that rewards differ within groups
    warm = run_sft_stage(load_config("default", [*tiny, *sft, f"trainer.output_dir={tmp_path / 'sft'}"]))
    runs = {}
    for learners in (1, 2):
        overrides = [f"model.path={warm}", "sft.steps=0", f"workers.learners={learners}", f"trainer.output_dir={tmp_path / str(learners)}"]
        runs[learners] = run_training(load_config("default", [*tiny, *overrides]))
    one, two = runs[1], runs[2]
    assert two.rl.rewards == pytest.approx(one.rl.rewards, abs=1e-6)
    assert [s["loss"] for s in two.rl.steps] == pytest.approx([s["loss"] for s in one.rl.steps], rel=1e-4, abs=1e-6)
    w1, w2 = (load_file(r.run_dir / "final" / "model.safetensors") for r in (one, two))
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-5
    w0 = load_file(warm / "model.safetensors")
    assert max((w1[k] - w0[k]).abs().max().item() for k in w1) > 1e-4  # RL moved the weights


def test_a_dead_learner_follower_stops_the_update_instead_of_hanging() -> None:
    """Kill the follower between two updates: rank 0's next collective fails (the connection is
    gone) or times out (workers.timeout_s, 20 s here); either way train_step raises, it does not hang."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = AlgoConfig()
    kwargs = dict(lr=1e-3, micro_batch_size=4, max_response_tokens=MAX_RESPONSE)
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    group = LearnerGroup(2, FollowerSpec(model.config, kwargs, algo, threads=1, timeout_s=20), model)
    try:
        group.learner.train_step(batch, make_policy_objective(algo))
        follower = group.followers[0]
        follower.kill()
        follower.join(timeout=10)
        with pytest.raises(RuntimeError):  # gloo: connection closed by peer (or its timeout); DistBackendError is one
            group.learner.train_step(batch, make_policy_objective(algo))
    finally:
        group._kill()
        dist.destroy_process_group()
