"""Several policies with the parts one policy has: a critic each, LoRA adapters each (on its own
frozen base), built by the same builders and trained by the same loop."""

from __future__ import annotations

import json
from pathlib import Path

import peft
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from reinforge.models import lora
from reinforge.run.pipeline import run_training
from run_records import copy_at_first_checkpoint, run_metrics
from test_several_policies import MICRO, config

NAMES = ("describer", "guesser")


def rl_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == "rl"]


def checkpoint_state(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step_{step:06d}" / "state.pt", weights_only=False)


def test_two_policies_each_train_a_critic_of_their_own(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(config(*MICRO, "critic.enabled=true", "algo.advantage=gae", "trainer.checkpoint_every=1",
                        "trainer.keep_checkpoints=10", f"trainer.output_dir={run_dir}"))
    for name in NAMES:  # each policy's critic step is logged under its own name, never unprefixed
        assert all(f"policy/{name}/value_loss" in r and f"policy/{name}/explained_variance" in r for r in rl_rows(run_dir))
    assert not any("value_loss" in r for r in rl_rows(run_dir))
    first, last = checkpoint_state(run_dir, 1)["policies"], checkpoint_state(run_dir, 3)["policies"]
    critics = {}
    for name in NAMES:
        before, after = first[name]["critic"]["model"], last[name]["critic"]["model"]
        assert any(not torch.equal(before[k], after[k]) for k in before), f"{name}'s critic was not trained"
        critics[name] = after
    d, g = critics["describer"], critics["guesser"]
    assert any(not torch.equal(d[k], g[k]) for k in d)  # two critics, each trained on its own policy's seats


def test_two_policies_each_train_lora_adapters_on_a_frozen_base_and_resume_exactly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(config(*MICRO, "model.lora={r: 4, alpha: 8}", "trainer.checkpoint_every=1", "trainer.keep_checkpoints=10",
                        f"trainer.output_dir={run_dir}"))
    setup = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    setup = {k: v for r in setup if r["stage"] == "setup" for k, v in r.items()}
    adapters = {}
    for name in NAMES:
        assert 0 < setup[f"policy/{name}/trainable_params"] < setup[f"policy/{name}/total_params"] / 5  # the adapters only
        saved = [run_dir / "checkpoints" / f"step_{s:06d}" / "model" / name for s in (1, 3)]
        assert not (saved[0] / "model.safetensors").exists()  # a checkpoint holds the adapter, not the weights
        before, after = (load_file(d / lora.ADAPTER_WEIGHTS) for d in saved)
        assert any(not torch.equal(before[k], after[k]) for k in before if "lora_B" in k), f"{name}'s adapters did not change"
        adapters[name] = after

        # final/<name> is a plain model: the policy's frozen warm start with its final adapter merged in.
        final = AutoModelForCausalLM.from_pretrained(run_dir / "final" / name)
        assert type(final).__name__ == "LlamaForCausalLM"
        warm_dir = run_dir / "warm_start" / name
        adapted = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(warm_dir), run_dir / "final" / name / lora.ADAPTER_DIR)
        merged = lora.merged_state_dict(adapted)
        assert all(torch.equal(merged[k], v) for k, v in final.state_dict().items())
        warm = AutoModelForCausalLM.from_pretrained(warm_dir).state_dict()
        assert any(not torch.equal(warm[k], v) for k, v in final.state_dict().items())  # RL moved it
    d, g = adapters["describer"], adapters["guesser"]
    assert any(not torch.equal(d[k], g[k]) for k in d)  # adapters of their own

    copy = tmp_path / "copy"
    copy_at_first_checkpoint(run_dir, copy)
    run_training(config(*MICRO, "model.lora={r: 4, alpha: 8}", "trainer.checkpoint_every=1", "trainer.keep_checkpoints=10",
                        f"trainer.output_dir={copy}"), resume=True)
    for name in NAMES:
        a, b = (load_file(r / "final" / name / "model.safetensors") for r in (run_dir, copy))
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: resumed weights differ"
    assert run_metrics(run_dir) == run_metrics(copy)
