"""Self-play learns tic-tac-toe (slow: minutes on two cores; run with `pytest -m slow`).

The tictactoe-selfplay recipe, shortened to its first RL_STEPS steps (seed 0, everything else as
shipped): after the warm-up on random-legal games, self-play with the game's result as the only
reward must raise the greedy win+draw rate against the random player by MARGIN (the recipe's own
run reached +28 points by that step) and keep the greedy illegal-move rate under 2% (docs/games.md
has the curves).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")
RL_STEPS = 20  # evaluations at 0, 10, 20 as in the recipe: the same run, cut short
MARGIN = 0.20  # the recipe's run: 46% -> 74% at step 20 (+28 points)


@pytest.mark.slow
def test_self_play_beats_the_random_player_more_often(tmp_path) -> None:
    cfg = load_config(RECIPE, [
        f"trainer.steps={RL_STEPS}", "trainer.checkpoint_every=0", "telemetry.progress=false",
        "telemetry.tensorboard=false", "telemetry.wandb=off", f"trainer.output_dir={tmp_path / 'run'}",
    ])
    before, after = (lambda evals: (evals[0], evals[-1]))(run_training(cfg).rl.evals)
    assert after["game/vs-random/win_draw"] >= before["game/vs-random/win_draw"] + MARGIN, (before, after)
    assert after["illegal_move_rate"] < 0.02, after["illegal_move_rate"]
