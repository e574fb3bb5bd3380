"""A critic trained by 2 gloo ranks (critic.enabled, workers.learners=2), sharded by FSDP2
(workers.sharding=fsdp) or replicated (none): every update is the one a single-process
CriticLearner makes on the whole mini-batch from the same state (the float32 bounds of
tests/float_bounds.py, step by step as tests/teacher_forcing.py does), for the clipped MSE value
loss and HL-Gauss's bins; a sharded rank holds about half the critic's weights; and the ranks'
checkpoint shards load, resharded, into one unsharded critic."""

from __future__ import annotations

import copy
import math
import types
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from deadlines import PROCESS_START_S
from two_ranks import run_two_ranks
from float_bounds import EPS32, SLACK, adam_step_bound, assert_within, forward_bound, gradient_bound, network_sizes
from gathered_state import full_optimizer_state
from reinforge.distributed.ddp import free_port, init_distributed, shard_rows
from reinforge.distributed.sharded_checkpoint import load_shards, save_shards, sharded_entry
from reinforge.config import load_config
from reinforge.distributed.critic_group import DataParallelCriticLearner, ReplicaDriverCritic, ShardedCriticLearner, critic_key
from reinforge.runtime.checkpoint import PART
from reinforge.learner.critic_learner import CriticLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.value_model import ValueModel
from reinforge.run import pipeline
from teacher_forcing import StepOutcome, grad_norm_bound
from test_ddp import LR, make_batch, make_tokenizer

SUPPORT = (-1.0, 1.5)
LOSSES = {  # value loss -> (the ValueModel's bins, the learner's options)
    "mse": (None, dict(loss="mse", clip_eps=0.2)),
    "hl_gauss": (11, dict(loss="hl_gauss", support=SUPPORT)),
}
STEPS = 2
KINDS = {"fsdp": ShardedCriticLearner, "none": DataParallelCriticLearner}  # workers.sharding -> each rank's critic
RUNS = [(kind, loss) for kind in KINDS for loss in LOSSES]


def value_model(tokenizer, loss: str) -> ValueModel:
    return ValueModel.from_config(tokenizer, "nano", num_bins=LOSSES[loss][0], support=SUPPORT, seed=0)


def critic_options(loss: str) -> dict:
    # micro-batches of 2 rows: the ranks' shards (5 and 4 rows) run 3 and 2, so one rank pads
    return dict(lr=LR, micro_batch_size=2, **LOSSES[loss][1])


def critic_batch(tokenizer):
    """The ragged 9-row batch of the data-parallel tests, with returns inside the bins' support and
    old values near 0, where the clip (0.2) holds some tokens and not others."""
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    g = torch.Generator().manual_seed(1)
    mask = batch.loss_mask.float()
    batch.returns = (torch.rand(mask.shape, generator=g) * 2.0 - 0.8) * mask
    batch.old_values = (torch.rand(mask.shape, generator=g) * 0.6 - 0.3) * mask
    return batch


def full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def train_sharded(rank: int, world_size: int, shards: str) -> dict:
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = critic_batch(tokenizer)
    shard = batch.select(shard_rows(len(batch), rank, world_size))
    out = {}
    for kind, loss in RUNS:
        critic = KINDS[kind](value_model(tokenizer, loss), **critic_options(loss))
        assert all(isinstance(p, DTensor) == (kind == "fsdp") for p in critic.model.parameters())
        steps = []
        for _ in range(STEPS):
            weights = {k: full(v) for k, v in critic.model.state_dict().items()}
            before = (weights, full_optimizer_state(critic.optimizer), critic.version)
            metrics = critic.train_step(shard, shard.returns, shard.old_values)
            params = dict(critic.model.named_parameters())
            steps.append((before, {k: full(p.grad) for k, p in params.items()}, {k: full(p) for k, p in params.items()}, metrics))
        out[kind, loss] = steps
        if kind == "fsdp":
            out[loss + "/after"] = ({k: full(v) for k, v in critic.model.state_dict().items()}, full_optimizer_state(critic.optimizer))
            save_shards({critic_key(loss): (critic.model, critic.optimizer)}, Path(shards) / loss)  # every rank its own shards
            local = sum(p.to_local().numel() for p in critic.model.parameters())
            out[loss + "/local_share"] = local / sum(p.numel() for p in critic.model.parameters())
    return out


def rank_main(rank: int, world_size: int, port: int, shards: str) -> dict:
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        return train_sharded(rank, world_size, shards)
    finally:
        dist.destroy_process_group()


def child_main(index: int, world_size: int, port: int, shards: str) -> None:
    rank_main(index + 1, world_size, port, shards)


def rank_0_main(index: int, world_size: int, port: int, shards: str, path: str) -> None:
    """Rank 0 in a process of its own (a process that ran FSDP2 keeps a gloo socket listening)."""
    torch.save(rank_main(0, world_size, port, shards), path)


@torch.no_grad()
def metric_bounds(critic: CriticLearner, batch) -> dict[str, float]:
    """How far each logged critic metric may move when only the summation order differs (ranks,
    micro-batches). A forward of the whole batch gives the head's output scale; each output (value
    or bin logit) errs by at most d = forward_bound(trunk, scale). A value then errs by dv = d
    (scalar head) or 2 * d * max|bin centre| (an expectation under a softmax: sum |dp| <= 2d); the
    per-token loss by dv * (max|V| + max|R| + clip) (clipped MSE: slope |V - R|) or 2d (a cross
    entropy against a target histogram); the explained variance 1 - Var[R - V] / Var[R] by
    4 * (max|R - V| + dv) * dv / Var[R]; each plus the rounding of its sums over n tokens."""
    model = critic.model
    model.eval()
    mask = batch.loss_mask.bool()
    n = int(mask.sum())
    outputs = model.logits(batch.input_ids, batch.attention_mask) if model.num_bins else model(batch.input_ids, batch.attention_mask)
    values = model.values_from_logits(outputs) if model.num_bins else outputs
    d = forward_bound(model.trunk, outputs[mask].abs().max().item())
    r = batch.returns[mask].double()
    v = values[mask].double()
    dv = 2 * d * max(map(abs, SUPPORT)) if model.num_bins else d
    loss = 2 * d if model.num_bins else dv * (v.abs().max().item() + r.abs().max().item() + critic.clip_eps)
    rounding = SLACK * math.sqrt(n) * EPS32 * (1 + r.abs().max().item()) ** 2
    explained = 4 * ((r - v).abs().max().item() + dv) * dv / r.var(unbiased=False).item()
    # a token whose |V - V_old| lies within dv of the clip may cross it
    near = ((v - batch.old_values[mask].double()).abs() - critic.clip_eps).abs() <= dv if critic.clip_eps else torch.zeros(0)
    return {
        "value_loss": loss + rounding, "value_mean": dv + rounding, "explained_variance": explained + rounding,
        "value_clip_frac": int(near.sum()) / n + rounding,
    }


def assert_same_step(reference: CriticLearner, batch, before, grads, weights, metrics, what: str) -> None:
    """The sharded step recorded from `before` is the one `reference` takes from it on the whole batch."""
    model_state, optimizer_state, version = before
    reference.model.load_state_dict(model_state)
    reference.optimizer.load_state_dict(copy.deepcopy(optimizer_state))  # a plain optimizer steps the tensors it loaded
    reference.version = version
    bounds = metric_bounds(reference, batch)
    expected = reference.train_step(batch, batch.returns, batch.old_values)
    layers, _ = network_sizes(reference.model.trunk)
    group = optimizer_state["param_groups"][0]
    for index, (name, param) in enumerate(reference.model.named_parameters()):
        assert_within(grads[name], param.grad, gradient_bound(param.grad, batch.num_loss_tokens, layers + 1), f"{what}: gradient of {name}")
        bound = adam_step_bound(model_state[name], grads[name], param.grad, group["lr"], optimizer_state["state"].get(index), group["betas"], group["eps"])
        assert_within(weights[name], param.detach(), bound, f"{what}: {name} after the step")
    assert metrics.keys() == expected.keys(), what
    norm_step = StepOutcome({k: p.grad for k, p in reference.model.named_parameters()}, {}, {"grad_norm": expected["value_grad_norm"]})
    bounds["value_grad_norm"] = grad_norm_bound(norm_step, reference.max_grad_norm, batch.num_loss_tokens, layers + 1)
    for key, value in metrics.items():
        assert abs(value - expected[key]) <= bounds[key], f"{what}: {key} {value} vs {expected[key]}, bound {bounds[key]:.3g}"


def test_two_critic_ranks_sharded_or_replicated_match_one_process(tmp_path) -> None:
    port = free_port()
    shards = tmp_path / "shards"
    run_two_ranks(rank_0_main, (2, port, str(shards), str(tmp_path / "rank0.pt")), child_main, (2, port, str(shards)))
    sharded = torch.load(tmp_path / "rank0.pt", weights_only=False)
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = critic_batch(tokenizer)
    for kind, loss in RUNS:
        initial = value_model(tokenizer, loss).state_dict()
        steps = sharded[kind, loss]
        assert all(torch.equal(steps[0][0][0][k], initial[k]) for k in initial), "rank 0's weights reached every rank"
        assert steps[1][0][1]["state"], "the second step starts from AdamW moments"
        reference = CriticLearner(value_model(tokenizer, loss), **critic_options(loss))
        for i, step in enumerate(steps):
            assert_same_step(reference, batch, *step, f"{kind} {loss} step {i + 1}")
        moved = max((steps[-1][2][k] - initial[k]).abs().max().item() for k in steps[-1][2])
        assert moved > LR / 2, "the critic trained"
        if kind != "fsdp":
            continue
        assert 0.4 < sharded[loss + "/local_share"] <= 0.6  # rank 0's shard: dim-0 halves (odd sizes round up)
        # The 2 ranks' checkpoint shards, resharded into one unsharded critic (workers.sharding=none
        # or workers.learners=1 resuming): exactly the weights and AdamW moments they held.
        alone = CriticLearner(value_model(tokenizer, loss), **critic_options(loss))
        load_shards(alone.model, alone.optimizer, sharded_entry(critic_key(loss), 2) | {PART: shards / loss}, alone=True)
        weights, optimizer = sharded[loss + "/after"]
        assert all(torch.equal(alone.model.state_dict()[k], v) for k, v in weights.items())
        loaded = alone.optimizer.state_dict()["state"]
        assert loaded.keys() == optimizer["state"].keys()
        assert all(torch.equal(loaded[i][k], v) for i, entry in optimizer["state"].items() for k, v in entry.items())


def test_the_pipeline_trains_a_replicated_critic_on_both_ranks() -> None:
    """workers.learners=2 (replicas) with a critic: the pipeline's learner group trains the critic
    too: rank 0 (here) trains the loop's value model on its rows, the spawned follower its own, and
    the step is the one a single process takes on the whole mini-batch."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    cfg = load_config("default", [
        "workers.learners=2", "critic.enabled=true", "algo.advantage=gae", "algo.micro_batch_size=2", "critic.lr=0.001",
        f"workers.timeout_s={PROCESS_START_S:g}",
    ])
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    critic = pipeline.build_critic(cfg, model, tokenizer)
    reference = CriticLearner(copy.deepcopy(critic.model), **critic.options)
    batch = critic_batch(tokenizer)
    _, group = pipeline.build_learners(cfg, {"policy": model}, types.SimpleNamespace(max_turns=1), {"policy": critic})
    try:
        driver = group.critics["policy"]
        assert isinstance(driver, ReplicaDriverCritic) and driver.model is critic.model, "rank 0 trains the loop's value model"
        before = ({k: v.clone() for k, v in driver.model.state_dict().items()}, copy.deepcopy(driver.optimizer.state_dict()), driver.version)
        metrics = driver.train_step(batch, batch.returns, batch.old_values)
        params = dict(driver.model.named_parameters())
        grads, weights = {k: p.grad.clone() for k, p in params.items()}, {k: p.detach().clone() for k, p in params.items()}
    finally:
        group.close()
    assert_same_step(reference, batch, before, grads, weights, metrics, "the pipeline's replicated critic")
