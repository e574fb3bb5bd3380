"""LoRA on the policy (reinforge.models.lora): what trains, what the reference and the engine see,
what a checkpoint and final/ hold, and the config errors. Needs the `lora` extra (peft)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA needs the peft package: pip install 'reinforge[lora]'")

from transformers import AutoModelForCausalLM  # noqa: E402

from reinforge.algos.policy_loss import ppo_clip_loss  # noqa: E402
from reinforge.config import ConfigError, LoraConfig, load_config  # noqa: E402
from reinforge.engines.base import SamplingParams  # noqa: E402
from reinforge.engines.torch_engine import TorchEngine  # noqa: E402
from reinforge.envs.single_turn import SingleTurnEnv  # noqa: E402
from reinforge.learner.batch import collate  # noqa: E402
from reinforge.learner.policy_learner import PolicyLearner, compute_logprobs  # noqa: E402
from reinforge.learner.reference import ReferenceModel  # noqa: E402
from reinforge.models import lora  # noqa: E402
from reinforge.rollout.episodes import rollout_groups  # noqa: E402
from reinforge.run.preflight import preflight  # noqa: E402
from reinforge.tasks.task import Task  # noqa: E402
from float_bounds import logit_bound  # noqa: E402

TEXTS = ["1+2=", "35+7=", "123+456=", "9=", "80+801="]
CONFIG = LoraConfig(r=4, alpha=8.0)


def lora_policy(model):
    """A LoRA policy on a private copy of `model`, its B matrices drawn non-zero (as after training),
    so that the adapters change the outputs."""
    policy = lora.apply_lora(copy.deepcopy(model), CONFIG, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return policy.eval()


def sampled_batch(engine, tokenizer, seed: int = 3):
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [Task(id=f"t{i}", prompt=t, answer="0") for i, t in enumerate(TEXTS)]
    params = SamplingParams(6, 1.0, stop_token_ids=(tokenizer.eos_token_id,))
    trajectories = rollout_groups(engine, env, tasks, 2, params, seed=seed)
    advantages = torch.linspace(-1, 1, len(trajectories))
    return collate(trajectories, advantages, tokenizer.pad_token_id), trajectories


def test_the_optimizer_holds_the_adapters_only_and_the_base_never_moves(sharp_nano_model, tokenizer) -> None:
    policy = lora_policy(sharp_nano_model)
    adapters = {name: p for name, p in policy.named_parameters() if "lora_" in name}
    # r x in + out x r per targeted layer: 7 layers x 2 blocks of the nano preset (hidden 64, mlp 256)
    per_block = 4 * (4 * 64 + 64 * 4) + 2 * (4 * 64 + 256 * 4) + (4 * 256 + 64 * 4)
    assert sum(p.numel() for p in adapters.values()) == 2 * per_block
    learner = PolicyLearner(policy, lr=1e-2)
    held = [p for group in learner.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in adapters.values()}
    assert learner.trainable_params == 2 * per_block

    base_before = {k: v.clone() for k, v in policy.get_base_model().state_dict().items() if ".lora_" not in k}
    adapters_before = {k: v.detach().clone() for k, v in adapters.items()}
    batch, _ = sampled_batch(TorchEngine(policy, tokenizer.pad_token_id), tokenizer)
    batch.old_logprobs = learner.logprobs(batch)

    def loss_fn(new, entropy, micro, norm):
        return ppo_clip_loss(new, micro.old_logprobs, micro.advantages, micro.loss_mask, 0.2, normalizer=norm.num_tokens)

    learner.train_step(batch, loss_fn)
    base_after = {k: v for k, v in policy.get_base_model().state_dict().items() if ".lora_" not in k}
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    assert all(not torch.equal(adapters_before[k], p) for k, p in adapters.items() if "lora_B" in k)


def test_the_reference_is_the_base_with_adapters_disabled(sharp_nano_model, tokenizer) -> None:
    policy = lora_policy(sharp_nano_model)
    reference = ReferenceModel(policy, micro_batch_size=4)
    assert reference.model is policy and reference.state_dict() is None  # no second copy of the weights
    batch, _ = sampled_batch(TorchEngine(policy, tokenizer.pad_token_id), tokenizer)
    mask = batch.loss_mask
    ref = reference.logprobs(batch)
    base = compute_logprobs(sharp_nano_model, batch, 4, 1.0, pack=reference.pack)  # the reference's forward
    assert torch.equal(ref[mask], base[mask])  # the same weights, the same forward: bit for bit
    assert (compute_logprobs(policy, batch, 64, 1.0) - base)[mask].abs().max() > 1e-2  # adapters back on afterwards


def test_merged_weights_are_w_plus_scaled_b_a_and_the_engine_samples_from_them(sharp_nano_model, tokenizer) -> None:
    policy = lora_policy(sharp_nano_model)
    layer = policy.get_base_model().model.layers[1].mlp.up_proj
    a, b, scale = layer.lora_A["default"].weight, layer.lora_B["default"].weight, CONFIG.alpha / CONFIG.r
    merged = lora.merged_state_dict(policy)
    expected = sharp_nano_model.model.layers[1].mlp.up_proj.weight + scale * b @ a
    assert torch.allclose(merged["model.layers.1.mlp.up_proj.weight"], expected, atol=1e-6)
    assert merged.keys() == sharp_nano_model.state_dict().keys()
    assert torch.equal(merged["model.norm.weight"], sharp_nano_model.model.norm.weight)
    adapter_before = a.detach().clone(), b.detach().clone()
    engine = TorchEngine(policy, tokenizer.pad_token_id)
    assert not lora.is_lora_model(engine.model)  # a plain model of the base architecture
    assert torch.equal(a, adapter_before[0]) and torch.equal(b, adapter_before[1])  # merging leaves the adapter alone

    # A sync after an update carries the new merged weights to the engine.
    with torch.no_grad():
        b.add_(0.1)
    engine.sync_weights(1)
    synced = engine.model.state_dict()["model.layers.1.mlp.up_proj.weight"]
    assert torch.equal(synced, lora.merged_state_dict(policy)["model.layers.1.mlp.up_proj.weight"])

    # Invariant 1 with LoRA: the learner's log-probs of what the engine sampled are its behaviour log-probs.
    batch, trajectories = sampled_batch(engine, tokenizer)
    assert {t.policy_version for t in trajectories} == {1}
    mask = batch.loss_mask
    learner = compute_logprobs(policy, batch, 64, 1.0)
    bound = logit_bound(engine.model, [t.token_ids for t in trajectories])
    assert (learner - batch.old_logprobs)[mask].abs().max() < bound
    unmerged = compute_logprobs(sharp_nano_model, batch, 64, 1.0)
    assert (unmerged - batch.old_logprobs)[mask].abs().max() > 1e-2  # the adapters did change what was sampled


TINY_LORA_RUN = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=8", "sft.steps=10", "rollout.prompts_per_step=2",
    "rollout.group_size=2", "trainer.steps=4", "eval.every=2", "eval.samples=1", "trainer.checkpoint_every=2",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off", "algo.lr=0.01",
    "algo.kl_coef=0.05", "model.lora={r: 4, alpha: 8}",
    # a reward that varies between the samples of a barely warmed-up model, so that RL moves the adapters
    "reward.components=[{name: short, fn: length, params: {target_tokens: 1, per_token: 0.1}}]",
]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    from reinforge.cli import main

    run = tmp_path_factory.mktemp("lora") / "run"
    assert main(["train", "--output", str(run), *TINY_LORA_RUN]) == 0
    return run


def test_a_lora_run_checkpoints_the_adapter_resumes_it_exactly_and_saves_a_merged_final(lora_run, tmp_path) -> None:
    from reinforge.cli import main
    from run_records import assert_same_run, copy_at_first_checkpoint

    run = lora_run
    setup = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (counts,) = [r for r in setup if r["stage"] == "setup"]
    assert 0 < counts["trainable_params"] < counts["total_params"] / 5

    first = sorted((run / "checkpoints").glob("step_*"))[0]
    assert {p.name for p in (first / "model").iterdir()} >= {"adapter_model.safetensors", "adapter_config.json"}
    assert not (first / "model" / "model.safetensors").exists()  # the adapter only, not the weights

    final = AutoModelForCausalLM.from_pretrained(run / "final")  # plain transformers, no peft
    assert type(final).__name__ == "LlamaForCausalLM"
    warm = AutoModelForCausalLM.from_pretrained(run / "warm_start").state_dict()
    adapted = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run / "warm_start"), run / "final" / lora.ADAPTER_DIR)
    merged = lora.merged_state_dict(adapted)  # the adapter of final/adapter on the warm start is final/
    assert all(torch.equal(merged[k], v) for k, v in final.state_dict().items())
    assert any(not torch.equal(warm[k], v) for k, v in final.state_dict().items())  # RL moved it

    copy_dir = tmp_path / "copy"
    copy_at_first_checkpoint(run, copy_dir)
    assert main(["train", "--resume", str(copy_dir)]) == 0
    assert_same_run(copy_dir, run)


def test_a_lora_checkpoint_on_another_base_is_refused(lora_run, tmp_path, capsys) -> None:
    from reinforge.cli import main
    from reinforge.models.loading import load_model_and_tokenizer, save_model
    from run_records import copy_at_first_checkpoint

    copy_dir = tmp_path / "copy"
    copy_at_first_checkpoint(lora_run, copy_dir)
    model, tokenizer = load_model_and_tokenizer(str(copy_dir / "warm_start"))
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    save_model(model, tokenizer, copy_dir / "warm_start")
    assert main(["train", "--resume", str(copy_dir)]) != 0
    err = capsys.readouterr().err
    assert "LoRA adapter was trained on a base model whose weights differ" in err and "warm_start" in err
    assert not (copy_dir / "final").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.lora.target_modules=[q_proj, qkv_proj]"], "'qkv_proj': no linear layer of the tiny Llama (model.preset=micro) has this name; its linear layers are: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"),
        (["model.lora.target_modules=[lm_head]"], "'lm_head': no linear layer"),  # tied to the embedding
        (["model.lora.r=8", "algo.kl_coef=0.1", "algo.ref_reset_every=5", "algo.ref_mixup_alpha=0.5"], "is not an adapter of the same rank"),
    ],
)
def test_bad_lora_configs_are_refused_before_compute(overrides, message) -> None:
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", overrides))
    assert message in str(err.value)


def test_lora_without_peft_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(lora, "peft_available", lambda: False)
    with pytest.raises(ConfigError, match=r"reinforge\[lora\]"):
        preflight(load_config("default", ["model.lora.r=8"]))


def test_lora_keys_are_checked_by_the_schema() -> None:
    with pytest.raises(ConfigError, match="valid keys here: r, alpha, target_modules, dropout"):
        load_config("default", ["model.lora.rank=8"])
    with pytest.raises(ConfigError, match="model.lora.r"):
        load_config("default", ["model.lora.r=0"])
    assert load_config("default", ["model.lora.r=4"]).model.lora.alpha == 16.0
    assert load_config("default").model.lora is None  # full fine-tuning by default
