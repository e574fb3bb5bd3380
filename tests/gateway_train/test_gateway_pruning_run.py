"""Rollout pruning by the success head through the gateway, a few RL steps on the nano model: the
head trains on the agent episodes' pieces (each with its episode's outcome) and logs
success_head/*; once warm it prunes inside the batcher's engine calls (prune/* > 0). A pruned
episode leaves the loss whole (none of its pieces is trained, none is counted as an agent failure)
and every trained group keeps at least success_head.min_group_size episodes."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gateway-agent.yaml"
SHORT = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=4", "sft.steps=20", "sft.batch_size=8", "rollout.prompts_per_step=2",
    "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=3", "eval.every=100", "eval.samples=1", "env.agent_timeout_s=60",
    "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
]
PRUNE = ["success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1"]


def test_gateway_agent_episodes_are_pruned_whole(tmp_path, recorded, gateways) -> None:
    outcome = run_training(load_config(str(RECIPE), [*SHORT, *PRUNE, f"trainer.output_dir={tmp_path}"]))
    rl = [r for r in map(json.loads, (outcome.run_dir / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]
    assert rl[0]["prune/active"] == 0.0 and all(r["prune/active"] == 1.0 for r in rl[1:])
    assert sum(r["prune/rollouts"] for r in rl) > 0 and sum(r["prune/tokens_pruned_rows"] for r in rl) > 0
    assert all(r["success_head/examples"] > 0 for r in rl) and all(r["agent_dropped"] == 0 for r in rl)
    for _, batch in recorded:
        episodes: dict[int, int] = {}
        for t in batch:
            assert t.finish_reason != "pruned"
            episodes[t.group_id] = episodes.get(t.group_id, 0) + (t.episode_part == 0)
        assert min(episodes.values()) >= 2, episodes  # success_head.min_group_size episodes, whole
    assert gateways and all(g.stats()["open_sessions"] == 0 for g in gateways)
