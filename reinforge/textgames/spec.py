"""What `task.params` says for `task.source: text_game`: the game, its options, the referee's rules.

    task:
      source: text_game
      params:
        game: wordle                  # wordle | twenty_questions | maze
        options: {}                   # the game's own (wordle: answers, vocabulary, words, guesses; ...)
        max_illegal_moves: 3          # the n-th illegal move ends the game, lost
        solved_reward: 1.0            # the episode's env reward when solved,
        failed_reward: 0.0            # and otherwise (lost, forfeited, or cut)
        turn_reward: 0.0              # per-turn rewards (optional): every turn,
        illegal_move_reward: 0.0      # each illegal move,
        progress_reward: 0.0          # times the game's progress signal of a legal move
        teacher_noise: 0.25           # the warm-up's demonstration player: share of random moves

Checked before any compute; every error names its `task.params` key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reinforge.textgames.game import GameOptionsError, TextGame
from reinforge.textgames.registry import TEXT_GAMES, build_game


class TextGameSpecError(ValueError):
    pass


class TextGameSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    game: str = Field(description=" | ".join(TEXT_GAMES))
    options: dict[str, Any] = Field(default_factory=dict, description="The game's own options (docs/games.md).")
    max_illegal_moves: int = Field(3, gt=0, description="The n-th illegal move ends the game as lost (finish reason illegal_moves).")
    solved_reward: float = Field(1.0, description="The env reward of a solved game.")
    failed_reward: float = Field(0.0, description="The env reward of a game not solved (lost, forfeited by illegal moves, or cut).")
    turn_reward: float = Field(0.0, description="Per-turn reward of every turn (e.g. a small cost per turn).")
    illegal_move_reward: float = Field(0.0, description="Per-turn reward of an illegal move.")
    progress_reward: float = Field(0.0, description="Per-turn reward per unit of the game's progress signal of a legal move.")
    teacher_noise: float = Field(0.25, ge=0.0, le=1.0, description="Share of random moves of the demonstration player the warm-up imitates.")

    @property
    def per_turn_rewards(self) -> bool:
        return any(r != 0.0 for r in (self.turn_reward, self.illegal_move_reward, self.progress_reward))


def parse_spec(params: dict) -> tuple[TextGameSpec, TextGame]:
    try:
        spec = TextGameSpec.model_validate(params)
    except ValidationError as err:
        lines = [f"task.params.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise TextGameSpecError("; ".join(lines) + " (task.source=text_game; docs/games.md)") from None
    try:
        game = build_game(spec.game, spec.options)
    except GameOptionsError as err:
        key = "game" if spec.game not in TEXT_GAMES else "options"
        raise TextGameSpecError(f"task.params.{key}: {err}") from None
    return spec, game
