"""Rollout pruning by the success head in games, a few RL steps on the nano model each: self-play,
an opponent pool, and two distinct policies (a head each). The head trains on every seat's final
turn and logs success_head/*; once warm it prunes (prune/* > 0), a pruned game leaves the loss for
every seat, and every trained group keeps at least success_head.min_group_size games."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPES = Path(__file__).parents[2] / "recipes"
QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off", "trainer.checkpoint_every=0"]
SHORT = ["model.preset=nano", "task.train_size=32", "task.params.eval_games=1", "sft.batch_size=4", "rollout.group_size=8",
         "trainer.steps=4", "eval.every=100", *QUIET]
# Warm after one step; the default check interval for a move of at most 4 tokens is 1 (after its first token).
PRUNE = ["success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1"]


def rl_rows(run_dir: Path) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]


def assert_whole_games_kept(batches, seats_per_game: int, min_games: int = 2) -> None:
    """No pruned trajectory is trained, and each group keeps whole games, at least `min_games`."""
    for _, batch in batches:
        sizes: dict[int, int] = {}
        for t in batch:
            assert t.finish_reason != "pruned"
            sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
        assert all(n % seats_per_game == 0 and n >= min_games * seats_per_game for n in sizes.values()), sizes


def test_self_play_prunes_whole_games(tmp_path, recorded) -> None:
    cfg = load_config(str(RECIPES / "tictactoe-selfplay.yaml"), [
        *SHORT, *PRUNE, "task.params.train_seats=[[policy, policy]]", "sft.steps=60", "rollout.prompts_per_step=2", f"trainer.output_dir={tmp_path}",
    ])
    rl = rl_rows(run_training(cfg).run_dir)
    assert rl[0]["prune/active"] == 0.0 and all(r["prune/active"] == 1.0 for r in rl[1:])  # warm after one step
    assert sum(r["prune/rollouts"] for r in rl) > 0 and all(r["success_head/examples"] > 0 for r in rl)
    assert 0 < rl[0]["success_head/positive_frac"] < 1  # the seats' own outcomes: wins and losses
    for r, (_, batch) in zip(rl, recorded):  # every rollout is trained or pruned, a game's two seats together
        assert len(batch) + r["prune/rollouts"] == 2 * 8 and r["prune/rollouts"] % 2 == 0
    assert_whole_games_kept(recorded, seats_per_game=2)


def test_games_against_an_opponent_pool_are_pruned(tmp_path, recorded) -> None:
    cfg = load_config(str(RECIPES / "tictactoe-selfplay.yaml"), [
        *SHORT, *PRUNE, "task.params.opponent_pool={every: 2, size: 2}", "task.params.train_seats=[[policy, pool], [pool, policy]]",
        "sft.steps=60", "rollout.prompts_per_step=2", f"trainer.output_dir={tmp_path}",
    ])
    rl = rl_rows(run_training(cfg).run_dir)
    assert sum(r["prune/rollouts"] for r in rl) > 0 and all("success_head/loss" in r for r in rl)
    assert all("pool/size" in r for r in rl), sorted(rl[0])  # the pool snapshots and plays on
    for r, (_, batch) in zip(rl, recorded):
        assert len(batch) + r["prune/rollouts"] == 2 * 8
    assert_whole_games_kept(recorded, seats_per_game=1)


def test_two_policies_each_train_and_prune_with_their_own_head(tmp_path, recorded) -> None:
    cfg = load_config(str(RECIPES / "describer-guesser.yaml"), [
        *SHORT, *PRUNE, "sft.steps=20", "rollout.prompts_per_step=3", f"trainer.output_dir={tmp_path}",
    ])
    rl = rl_rows(run_training(cfg).run_dir)
    assert sum(r["prune/rollouts"] for r in rl) > 0
    for name in ("describer", "guesser"):  # a head each, trained on its own seats
        assert rl[-1][f"policy/{name}/success_head/examples"] > 0 and f"policy/{name}/success_head/loss" in rl[-1]
    assert "success_head/loss" not in rl[-1]
    assert_whole_games_kept(recorded, seats_per_game=1)  # each policy trains on its own seat of a game
