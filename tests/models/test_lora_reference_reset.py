"""The reference of a LoRA policy reset to the current policy (algo.ref_reset_every with model.lora):
base + a frozen copy of the adapters as they were at the reset (no copy of the weights); a run with
periodic resets, and an exact resume across one. Needs the `lora` extra (peft)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA needs the peft package: pip install 'reinforge[lora]'")

from safetensors.torch import load_file  # noqa: E402

import reinforge  # noqa: E402

from reinforge.config import LoraConfig, load_config  # noqa: E402
from reinforge.engines.base import SamplingParams  # noqa: E402
from reinforge.engines.torch_engine import TorchEngine  # noqa: E402
from reinforge.envs.single_turn import SingleTurnEnv  # noqa: E402
from reinforge.learner.batch import collate  # noqa: E402
from reinforge.learner.policy_learner import compute_logprobs  # noqa: E402
from reinforge.learner.reference import ReferenceModel  # noqa: E402
from reinforge.models import lora  # noqa: E402
from reinforge.rollout.episodes import rollout_groups  # noqa: E402
from reinforge.run.preflight import preflight  # noqa: E402
from reinforge.tasks.task import Task  # noqa: E402

CONFIG = LoraConfig(r=4, alpha=8.0)


def lora_policy(model, seed: int = 1):
    """A LoRA policy on a private copy of `model`, its B matrices drawn non-zero (as after training)."""
    policy = lora.apply_lora(copy.deepcopy(model), CONFIG, seed=0)
    move_adapters(policy, seed)
    return policy.eval()


@torch.no_grad()
def move_adapters(policy, seed: int) -> None:
    """What an optimizer step does to the adapters, for the test: every B moves."""
    generator = torch.Generator().manual_seed(seed)
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.add_(torch.randn(p.shape, generator=generator) * 0.3)


def sampled_batch(engine, tokenizer):
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [Task(id=f"t{i}", prompt=t, answer="0") for i, t in enumerate(["1+2=", "35+7=", "123+456="])]
    trajectories = rollout_groups(engine, env, tasks, 2, SamplingParams(6, 1.0, stop_token_ids=(tokenizer.eos_token_id,)), seed=3)
    return collate(trajectories, None, tokenizer.pad_token_id)


def test_after_a_reset_the_reference_is_the_policy_of_that_moment(sharp_nano_model, tokenizer) -> None:
    policy = lora_policy(sharp_nano_model)
    reference = ReferenceModel(policy, micro_batch_size=4)
    batch = sampled_batch(TorchEngine(policy, tokenizer.pad_token_id), tokenizer)
    mask = batch.loss_mask

    def policy_now() -> torch.Tensor:  # the reference's forward path, on the policy's live adapters
        return compute_logprobs(policy, batch, 4, 1.0, pack=reference.pack)

    base = reference.logprobs(batch)  # before any reset: the base, adapters disabled
    reference.reset_to(policy)
    at_reset = policy_now()
    after_reset = reference.logprobs(batch)
    assert torch.equal(after_reset[mask], at_reset[mask])  # the same weights, the same forward: bit for bit
    assert (after_reset - base)[mask].abs().max() > 1e-2  # no longer the base

    live = lora.adapter_tensors(policy)
    move_adapters(policy, seed=2)  # the policy trains on
    moved = lora.adapter_tensors(policy)
    assert torch.equal(reference.logprobs(batch)[mask], after_reset[mask])  # the reference stays where it was reset
    assert all(torch.equal(moved[k], p) for k, p in lora.adapter_tensors(policy).items())  # its own adapters put back exactly
    assert (policy_now() - at_reset)[mask].abs().max() > 1e-2
    assert any(not torch.equal(live[k], moved[k]) for k in live)

    # A checkpoint holds the adapter copy (a few tensors, not the model), and a resumed reference computes the same.
    state = reference.state_dict()
    assert set(state) == {"adapter"} and state["adapter"].keys() == live.keys()
    resumed = ReferenceModel(policy, micro_batch_size=4)
    resumed.load_state_dict(state)
    assert torch.equal(resumed.logprobs(batch), reference.logprobs(batch))
    resumed.load_state_dict(None)  # a checkpoint before any reset: the base again
    assert torch.equal(resumed.logprobs(batch)[mask], base[mask])


def test_a_soft_update_of_a_lora_reference_is_refused(sharp_nano_model) -> None:
    policy = lora_policy(sharp_nano_model)
    with pytest.raises(ValueError, match="use algo.ref_mixup_alpha=1.0"):
        ReferenceModel(policy).update_toward(policy, 0.5)
    reference = ReferenceModel(policy)
    reference.update_toward(policy, 1.0)  # the hard reset
    assert reference.adapter is not None


def test_lora_with_reference_resets_passes_preflight() -> None:
    preflight(load_config("default", ["model.lora={r: 4}", "algo.kl_coef=0.01", "algo.ref_reset_every=10"]))


RUN = {
    "model.preset": "nano", "task.train_size": 64, "task.eval_size": 8, "sft.steps": 10, "rollout.prompts_per_step": 2,
    "rollout.group_size": 4, "trainer.steps": 4, "eval.every": 4, "eval.samples": 1, "trainer.checkpoint_every": 2,
    "telemetry.progress": False, "telemetry.tensorboard": False, "telemetry.wandb": "off", "algo.lr": 0.01,
    "algo.kl_coef": 0.05, "model.lora": {"r": 4, "alpha": 8}, "algo.ref_reset_every": 2, "reward.isolation": "thread",
}


def response_length(task, trajectory) -> float:
    """A reward that differs within groups from the first step, so that RL moves the adapters at once."""
    return float(len(trajectory.response_text))


@pytest.fixture(scope="module")
def reset_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lora_reset") / "run"
    reinforge.train("default", RUN, output_dir=run, reward_fns=[response_length])
    return run


def test_a_lora_run_resets_its_reference_to_the_adapters_of_the_step(reset_run: Path) -> None:
    for step in (2, 4):  # reset at the end of steps 2 and 4: the checkpoint's reference is its own adapter
        checkpoint = reset_run / "checkpoints" / f"step_{step:06d}"
        adapter = load_file(checkpoint / "model" / lora.ADAPTER_WEIGHTS)  # peft's names, without the adapter's name
        reference = torch.load(checkpoint / "state.pt", weights_only=False)["reference"]["adapter"]
        assert {name.replace(".default", "") for name in reference} == {name for name in adapter}
        assert all(torch.equal(t, adapter[name.replace(".default", "")]) for name, t in reference.items())
    rl = [r for r in map(json.loads, (reset_run / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]
    kl = [r["kl_ref"] for r in rl]
    # Step 3 starts from the reference it was reset to at step 2's end: its KL is float noise, while
    # step 2 measured two steps of drift from the base.
    assert kl[1] > 1e-6 and abs(kl[2]) < kl[1] / 100


def test_a_lora_run_resumes_exactly_across_a_reset(reset_run: Path, tmp_path: Path) -> None:
    from run_records import assert_same_run, copy_at_first_checkpoint

    copy_dir = tmp_path / "copy"
    copy_at_first_checkpoint(reset_run, copy_dir)  # at step 2, right after the first reset
    reinforge.train(resume=copy_dir, reward_fns=[response_length])
    assert_same_run(copy_dir, reset_run)
