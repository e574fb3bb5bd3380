"""workers.fsdp_precision / workers.fsdp_offload (reinforge.distributed.fsdp_policies): what they
resolve to, what is refused, and 2 FSDP2 ranks computing in bf16 on the CPU (gloo) against the
same ranks in fp32, within a bound derived from bf16's rounding."""

from __future__ import annotations

import math
import types

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy
from torch.distributed.tensor import DTensor

from reinforge.config import ConfigError, load_config
from reinforge.distributed.ddp import init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.distributed.fsdp_policies import fully_shard_options, process_group_backend, resolve_precision
from reinforge.distributed.teardown import leave_process_group
from reinforge.learner.logprobs import token_logprobs
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.run import pipeline, preflight
from deadlines import PROCESS_START_S
from float_bounds import EPS32, adam_first_step_bound, forward_bound
from rank_zero_here import rank_zero_here
from test_ddp import LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer

EPS_BF16 = torch.finfo(torch.bfloat16).eps  # 2**-7: bf16 keeps 8 significant bits, float32 24


def test_auto_is_bf16_on_a_gpu_and_fp32_on_the_cpu() -> None:
    assert load_config("default", []).workers.fsdp_precision == "auto"
    assert resolve_precision("auto", "cuda") == resolve_precision("auto", "cuda:1") == "bf16"
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", "cuda") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    policy = fully_shard_options("bf16", offload=False)["mp_policy"]
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert fully_shard_options("fp32", offload=False) == {}
    assert isinstance(fully_shard_options("fp32", offload=True)["offload_policy"], CPUOffloadPolicy)
    # Offloaded shards are host tensors: their collectives need gloo beside NCCL.
    assert process_group_backend("cuda", offload=True) == "cuda:nccl,cpu:gloo"
    assert process_group_backend("cuda", offload=False) is None


def test_the_run_hands_the_resolved_settings_to_the_learner_group(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = []

    def capture(group, world_size, spec, models):
        specs.append(spec)
        group.learners, group.spec = {}, spec

    monkeypatch.setattr("reinforge.distributed.learner_group.LearnerGroup.__init__", capture)
    model = build_tiny_llama(make_tokenizer(), "nano", seed=0)
    for precision, expected in (("auto", "fp32"), ("bf16", "bf16")):
        cfg = load_config("default", ["workers.sharding=fsdp", "workers.learners=2", f"workers.fsdp_precision={precision}"])
        pipeline.build_learners(cfg, {"policy": model}, types.SimpleNamespace(max_turns=1))
        assert specs[-1].learner_options == {"precision": expected, "offload": False}
        assert specs[-1].backend is None


@pytest.mark.parametrize(("overrides", "message"), [
    (["workers.sharding=fsdp", "workers.learners=2", "workers.fsdp_offload=true"], r"model.device=cpu is the host already: set workers.fsdp_offload=false"),
    (["workers.fsdp_precision=bf16"], r"workers.fsdp_precision=bf16 .* workers.sharding=none: set workers.sharding=fsdp"),
    (["workers.fsdp_offload=true"], r"workers.fsdp_offload=true .* workers.sharding=none"),
])
def test_settings_that_cannot_take_effect_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight.preflight(load_config("default", overrides))


def one_step(rank: int, world_size: int, precision: str) -> dict:
    """One sharded step from the same start; this rank's log-probs before it (the sharded forward
    in `precision`), and the whole model's gradients and weights after it (gathered)."""
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    shard = batch.select(shard_rows(len(batch), rank, world_size))
    learner = ShardedPolicyLearner(
        build_tiny_llama(tokenizer, "nano", seed=0), LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE, precision=precision,
    )
    with torch.no_grad():
        logprobs, _ = token_logprobs(learner.model, shard.input_ids, shard.attention_mask, entropy=False, chunk_tokens=None)
    learner.train_step(shard, make_policy_objective(algo_for("token_mean")))
    params = dict(learner.model.named_parameters())
    return {
        "logprobs": logprobs[shard.loss_mask.bool()],  # the sampled tokens' log-probs (both [N, T-1])
        "master_dtypes": {p.dtype for p in params.values()} | {p.to_local().dtype for p in params.values() if isinstance(p, DTensor)},
        "grads": {k: p.grad.full_tensor().clone() for k, p in params.items()},
        "weights": {k: p.full_tensor().clone() for k, p in params.items()},
    }


def follower(index: int, world_size: int, port: int) -> None:
    torch.set_num_threads(1)
    init_distributed(index + 1, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        for precision in ("fp32", "bf16"):
            one_step(index + 1, world_size, precision)
    finally:
        leave_process_group()


def test_two_ranks_in_bf16_match_fp32_within_bf16_rounding() -> None:
    """bf16 runs on the CPU with gloo. Its log-probs differ from fp32's (the option does compute in
    bf16) by no more than float_bounds' forward error model with bf16's unit roundoff in place of
    float32's; the master weights stay float32; and the step from the same start stays within Adam's
    first-step bound given the gradients each precision computed (a wrong step moves weights by ~lr)."""
    torch.set_num_threads(1)
    with rank_zero_here(follower):
        fp32, bf16 = (one_step(0, 2, precision) for precision in ("fp32", "bf16"))
    model = build_tiny_llama(make_tokenizer(), "nano", seed=0)
    start = dict(model.named_parameters())
    scale = fp32["logprobs"].abs().max().item()
    bound = forward_bound(model, scale) * EPS_BF16 / EPS32  # the same error model, bf16's rounding
    gap = (bf16["logprobs"] - fp32["logprobs"]).abs().max().item()
    assert 0 < gap <= bound, f"bf16 vs fp32 log-probs: {gap:.3g}, bound {bound:.3g}"
    assert fp32["master_dtypes"] == bf16["master_dtypes"] == {torch.float32}
    for name, weights in bf16["weights"].items():
        allowed = adam_first_step_bound(start[name].detach(), bf16["grads"][name], fp32["grads"][name], LR)
        assert ((weights.double() - fp32["weights"][name].double()).abs() <= allowed).all(), name
        assert math.isfinite(weights.abs().max().item())
