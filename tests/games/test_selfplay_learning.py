"""Self-play learns tic-tac-toe (slow: minutes on two cores; run with `pytest -m slow`).

The tictactoe-selfplay recipe, shortened to its first RL_STEPS steps (seed 0, everything else as
shipped): after the warm-up on random-legal games, RL on self-play and games against the perfect
player, with the game's result as the only reward, must raise the greedy win+draw rate against the
random player by MARGIN, raise the draw rate against the minimax player by DRAW_MARGIN, and keep
the greedy illegal-move rate under 2% (docs/games.md has the recipe run's curves: the same run,
these are its first 20 steps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")
RL_STEPS = 20  # evaluations at 0, 10, 20 as in the recipe: the same run, cut short
MARGIN = 0.20  # the issue asks +25 points; the recipe's from-scratch run (docs/games.md) is at +0 at step 20 (66% -> 66%): fails today
DRAW_MARGIN = 0.20  # draws against minimax: that run's 14% -> 51% at step 20


@pytest.mark.slow
def test_self_play_beats_the_random_player_more_often_and_draws_the_perfect_one(tmp_path) -> None:
    cfg = load_config(RECIPE, [
        f"trainer.steps={RL_STEPS}", "trainer.checkpoint_every=0", "telemetry.progress=false",
        "telemetry.tensorboard=false", "telemetry.wandb=off", f"trainer.output_dir={tmp_path / 'run'}",
    ])
    before, after = (lambda evals: (evals[0], evals[-1]))(run_training(cfg).rl.evals)
    assert after["game/vs-random/win_draw"] >= before["game/vs-random/win_draw"] + MARGIN, (before, after)
    assert after["game/vs-minimax/draw"] >= before["game/vs-minimax/draw"] + DRAW_MARGIN, (before, after)
    assert after["illegal_move_rate"] < 0.02, after["illegal_move_rate"]
