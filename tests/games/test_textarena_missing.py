"""Without the textarena extra, a textarena game is refused before any compute, naming the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import preflight

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")


def test_a_textarena_game_without_the_extra_names_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "textarena", None)  # import textarena -> ImportError, installed or not
    cfg = load_config(RECIPE, ["task.params.game=textarena:TicTacToe-v0", "task.params.eval_opponents=[random]"])
    with pytest.raises(ConfigError, match=r"task.params.game: textarena games need the textarena package.*pip install 'reinforge\[textarena\]'"):
        preflight(cfg)
