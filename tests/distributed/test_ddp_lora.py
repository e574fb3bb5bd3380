"""LoRA on a data-parallel learner group (model.lora with workers.learners=2): the follower wraps its
model in the same adapters as rank 0, so both train the adapters of one policy on a frozen base and
every step is the single learner's step on the whole batch."""

from __future__ import annotations

import pytest
import torch

from reinforge.config import AlgoConfig, LoraConfig, load_config
from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.run.preflight import preflight
from reinforge.learner.policy_objective import make_policy_objective
from deadlines import PROCESS_START_S
from teacher_forcing import assert_replays, recorded_step
from test_ddp import MAX_RESPONSE, make_batch, make_tokenizer

pytest.importorskip("peft")

from reinforge.models.lora import apply_lora  # noqa: E402

LORA = LoraConfig(r=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])


def test_two_learners_train_the_same_adapters_as_one_and_leave_the_base_frozen() -> None:
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = AlgoConfig(entropy_coef=0.01)
    loss_fn = make_policy_objective(algo)
    kwargs = dict(lr=1e-2, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)

    def lora_model():
        return apply_lora(build_tiny_llama(tokenizer, "nano", seed=0), LORA, seed=0)

    model = lora_model()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    spec = FollowerSpec(model.config, kwargs, algo, threads=1, timeout_s=PROCESS_START_S, lora=LORA, lora_seed=0)
    group = LearnerGroup(2, spec, model)
    try:
        steps = [recorded_step(group.learner, batch, loss_fn) for _ in range(3)]
    finally:
        group.close()
    assert [p.exitcode for p in group.followers] == [0]

    # Only the adapters train: they are what the ranks all-reduce and step; the base stays as it was.
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in name for name in trainable)
    end = model.state_dict()
    assert all(torch.equal(end[k], v) for k, v in start.items() if ".lora_" not in k), "the frozen base changed"
    moved = max((end[k] - start[k]).abs().max().item() for k in start if ".lora_" in k)
    assert moved > kwargs["lr"] / 2, "the adapters did not train"
    # Each of the group's steps is the single learner's step (on its own LoRA model) from the same
    # state on the whole batch, within float-noise bounds: a follower without adapters, or one
    # whose gradients were not reduced, would send another shard gradient and fail the check.
    assert_replays(PolicyLearner(lora_model(), **kwargs), steps, algo)


def test_preflight_accepts_lora_with_several_learners() -> None:
    cfg = load_config("default", ["model.preset=nano", "model.lora={r: 4}", "workers.learners=2"])
    preflight(cfg)  # it refused the pair before the followers built the adapters too
