"""Two distinct policies learn the describer/guesser game (slow: minutes on two cores; `pytest -m slow`).

The describer-guesser recipe, shortened to its first RL_STEPS steps (seed 0, everything else as
shipped): after the warm-up (half its moves by a wrong one-to-one code, so the warm start reads the
secret but wins no game with the literal partner), RL with the game's result as the only reward
must bring each policy's greedy success with the fixed `literal` partner MARGIN above chance (0.25)
and at least MARGIN above its warm start, and the pair's own success MARGIN above chance.
docs/games.md has the recipe run's curves (this is that run, cut at step 10: 1.00 / 0.67 / 0.80).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = str(Path(__file__).parents[2] / "recipes" / "describer-guesser.yaml")
RL_STEPS = 10
CHANCE = 0.25
MARGIN = 0.25


@pytest.mark.slow
def test_both_policies_learn_the_literal_code_and_the_pair_its_own(tmp_path) -> None:
    cfg = load_config(RECIPE, [
        f"trainer.steps={RL_STEPS}", "eval.every=10", "trainer.checkpoint_every=0", "telemetry.progress=false",
        "telemetry.tensorboard=false", "telemetry.wandb=off", f"trainer.output_dir={tmp_path / 'run'}",
    ])
    evals = run_training(cfg).rl.evals
    before, after = evals[0], evals[-1]
    for name in ("describer", "guesser"):
        key = f"policy/{name}/vs-literal/win"
        assert after[key] >= max(CHANCE, before[key]) + MARGIN, (key, before[key], after[key])
    assert after["game/joint/win"] >= CHANCE + MARGIN, (before["game/joint/win"], after["game/joint/win"])
    assert after["illegal_move_rate"] < 0.02, after["illegal_move_rate"]
