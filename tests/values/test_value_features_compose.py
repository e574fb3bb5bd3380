"""Value features with multi-turn episodes, the async schedule and partial rollouts (issue 29):
the success head reads a multi-turn episode's final turn, the value heads train under async, and
the staleness filter keeps partial rollouts resumed from older weights out of their training."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from reinforge.config import load_config
from reinforge.learner.success_head_learner import SuccessHeadLearner, trajectory_features
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.runtime.checkpoint import list_checkpoints, load_state
from reinforge.run.pipeline import run_training
from reinforge.values.turn_progress import TurnProgress
from reinforge.values.value_heads import newest_samples

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
TINY = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=4", *QUIET, "rollout.prompts_per_step=2", "rollout.group_size=4",
    "rollout.max_new_tokens=8", "trainer.steps=3", "eval.every=3", "eval.samples=1", "sft.steps=0", "trainer.checkpoint_every=3",
]
TOOL = ["env.type=tool", "env.tools=[calculator]", "rollout.prompt_format=chat", "env.max_turns=2"]
ASYNC = ["trainer.schedule=async", "algo.tis_cap=2.0"]


def train(tmp_path: Path, overrides: list[str]):
    cfg = load_config("default", [*TINY, *overrides, f"trainer.output_dir={tmp_path}"])
    run_training(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    heads = load_state(list_checkpoints(tmp_path)[-1])["schedule"]["collector"]["heads"]
    return cfg, [r for r in rows if r["stage"] == "rl"], heads


def head_vocab(heads: dict) -> int:
    return heads["success"]["features"].shape[1] - 6  # phi = [the policy's next-token distribution, 6 scalars]


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


def test_a_multi_turn_episode_is_scored_on_its_final_turn(nano_model) -> None:
    # Two policy turns with an observation between; the head must see the last turn as the response to
    # everything before it, exactly as a single-turn trajectory with that context as its prompt.
    ids = list(range(5, 25))
    logprobs = [-0.1 * i for i in range(len(ids))]
    first, last = (6, 10), (13, 20)
    mask = [first[0] <= i < first[1] or last[0] <= i < last[1] for i in range(len(ids))]
    one = single_turn_trajectory("t", ids[: last[0]], ids[last[0] : last[1]], logprobs[last[0] : last[1]], "x")
    episode = dataclasses.replace(
        one, token_ids=ids, loss_mask=mask, turn_spans=[first, last], prompt_length=first[0],
        behaviour_logprobs=[lp if m else 0.0 for lp, m in zip(logprobs, mask)],
    )
    got, _ = trajectory_features(nano_model, [episode], every=2, budget=8)
    want, _ = trajectory_features(nano_model, [one], every=2, budget=8)
    assert torch.equal(got, want)
    assert len(got) == 4  # prefixes 2, 4, 6 and the whole 7-token last turn, not the 14 tokens from the first turn on


def test_success_head_trains_on_a_multi_turn_env(tmp_path: Path) -> None:
    cfg, rl, heads = train(tmp_path, [*TOOL, "success_head.enabled=true"])
    assert [r["success_head/examples"] for r in rl] == sorted({r["success_head/examples"] for r in rl}) and rl[0]["success_head/examples"] > 0
    assert all("success_head/loss" in r for r in rl)
    fresh = SuccessHeadLearner(cfg.success_head, head_vocab(heads), cfg.rollout.max_new_tokens, cfg.trainer.seed + 20_000)
    assert changed(fresh.head.state_dict(), heads["success"]["head"])


def test_progress_and_the_success_head_train_under_async(tmp_path: Path) -> None:
    cfg, rl, heads = train(tmp_path / "progress", [*TOOL, *ASYNC, "progress.enabled=true", "algo.advantage=turn_rloo"])
    assert all("progress/loss" in r and r["value_heads/stale_dropped"] == 0 for r in rl)
    untrained = TurnProgress(cfg.progress, heads["progress"]["model"]["embed.weight"].shape[0], cfg.trainer.seed + 20_001)
    assert changed(untrained.model.state_dict(), heads["progress"]["model"])

    cfg, rl, heads = train(tmp_path / "success", [*ASYNC, "success_head.enabled=true"])
    assert heads["success"]["steps_trained"] == cfg.trainer.steps and all("success_head/loss" in r for r in rl)


def test_partial_rollouts_resumed_from_older_weights_do_not_train_the_head(tmp_path: Path) -> None:
    cfg, rl, heads = train(tmp_path, ["success_head.enabled=true", "trainer.partial_rollouts=true", "algo.tis_cap=2.0"])
    dropped = [r["value_heads/stale_dropped"] for r in rl]
    assert sum(dropped) > 0  # carried-over groups sampled with the weights before the last update
    # the buffer holds the fresh samples only: one whole-response example per fresh trajectory
    whole = int(heads["success"]["features"][:, -1].sum())
    assert whole == cfg.trainer.steps * cfg.rollout.prompts_per_step * cfg.rollout.group_size - sum(dropped)


def test_the_staleness_filter_keeps_the_newest_version() -> None:
    ts = [single_turn_trajectory("t", [1], [2], [-0.5], "x", policy_version=v) for v in (3, 2, 3, 1)]
    assert [t.policy_version for t in newest_samples(ts)] == [3, 3]
    assert newest_samples([]) == []


def test_progress_trains_on_partial_multi_turn_rollouts(tmp_path: Path) -> None:
    """Partial rollouts pause tool-env episodes across steps (reinforge.rollout.partial_turns); turn
    progress trains on the newest version's finished episodes and drops the carried-over ones."""
    cfg, rl, heads = train(tmp_path, [*TOOL, "trainer.partial_rollouts=true", "algo.tis_cap=2.0", "progress.enabled=true", "algo.advantage=turn_rloo"])
    assert all("progress/loss" in r for r in rl)
    assert sum(r["value_heads/stale_dropped"] for r in rl) > 0  # groups carried over from older weights
    untrained = TurnProgress(cfg.progress, heads["progress"]["model"]["embed.weight"].shape[0], cfg.trainer.seed + 20_001)
    assert changed(untrained.model.state_dict(), heads["progress"]["model"])
