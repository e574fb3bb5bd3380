"""Two distinct policies both learn describer_guesser (slow: minutes on two cores; `pytest -m slow`).

The describer-guesser recipe, shortened to its first RL_STEPS steps (seed 0, everything else as
shipped): each policy's own measure must rise by MARGIN over its warm start: the describer's clues
with the fixed literal guesser, the guesser's answers with the fixed literal describer (docs/games.md
has the curves, and the comparison with one shared policy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = str(Path(__file__).parents[2] / "recipes" / "describer-guesser.yaml")
RL_STEPS = 30
MARGIN = 0.25


@pytest.mark.slow
def test_both_policies_improve_each_by_its_own_measure(tmp_path) -> None:
    cfg = load_config(RECIPE, [
        f"trainer.steps={RL_STEPS}", "trainer.checkpoint_every=0", "telemetry.progress=false",
        "telemetry.tensorboard=false", "telemetry.wandb=off", f"trainer.output_dir={tmp_path / 'run'}",
    ])
    evals = run_training(cfg).rl.evals
    before, after = evals[0], evals[-1]
    for name in ("describer", "guesser"):
        key = f"policy/{name}/vs-literal/win"
        assert after[key] >= before[key] + MARGIN, (name, before[key], after[key])
