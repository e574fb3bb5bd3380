"""TextArena's two-player games through the games protocol (`task.params.game: "textarena:TicTacToe-v0"`).

TextArena (Guertler et al. 2025; PyPI `textarena`, the optional extra `pip install
'reinforge[textarena]'`) is a collection of text games. Its envs hold their own state: `reset`,
then `step(action_text)` for the player to move, and per-player observation queues that hold
exactly what each player is told (a Kuhn poker card goes to its holder only). This adapter keeps
that state in an `ArenaTable` and referees it with `ArenaMatch`, the games referee (games.match)
with textarena as the judge:

- each player's message on its turn is what textarena queued for it since its last turn, each
  line as textarena's own LLM wrapper writes it ("[GAME] ...", "[Player 1] ..."): hidden
  information stays hidden because textarena addresses it;
- a move is the player's text, handed to textarena as is; it is illegal when textarena rejects it
  (it then tells the player why, and the player moves again). TextArena's own limit of errors is
  lifted so that reinforge's `max_illegal_moves` applies (the n-th illegal move loses the game);
- the result is textarena's rewards (win 1, loss -1, draw 0 -> `draw_reward`); `env.max_turns`
  cuts a long game as for every game.

Fixed players: `random` plays a legal move, read from the env's state for the games listed in
`LEGAL_MOVES` (the ones supported here: offline, two players, legal moves readable). Online games
and games judged by an LLM are out of scope. TextArena seeds Python's global `random` in `reset`
and draws from it in `step` (Kuhn's deal); the table runs every textarena call on a random state
of its own and restores the caller's, so games are reproducible and the run's own randomness is
untouched.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reinforge.games.game import Game
from reinforge.games.match import FINISHED, Match

INSTALL_HINT = "pip install 'reinforge[textarena]'"


def _tictactoe_moves(env: Any) -> list[str]:
    board = env.state.game_state["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _connect_four_moves(env: Any) -> list[str]:
    return [f"[col {c}]" for c in range(env.num_cols) if env.state.game_state["board"][0][c] == "."]


def _kuhn_moves(env: Any) -> list[str]:
    return [f"[{action}]" for action in env.state.game_state["current_legal_action_tree"]]


# Supported env ids: (the longest game in moves of both players, its legal-move reader)
LEGAL_MOVES: dict[str, tuple[int, Callable[[Any], list[str]]]] = {
    "TicTacToe-v0": (9, _tictactoe_moves),
    "ConnectFour-v0": (42, _connect_four_moves),
    "KuhnPoker-v0": (9, _kuhn_moves),  # 3 hands of at most 3 moves
}


def import_textarena():
    try:
        import textarena
    except ImportError:
        raise ValueError(f"textarena games need the textarena package, which is not installed: {INSTALL_HINT}") from None
    return textarena


class ArenaTable:
    """One textarena env in play, with its own random state."""

    def __init__(self, env_id: str, seed: int):
        ta = import_textarena()
        self._random = random.Random(seed).getstate()
        self.env = ta.make(f"{env_id}-raw")  # no wrappers: the referee formats the messages
        self._call(self.env.reset, num_players=2, seed=seed)
        if not isinstance(self.env.state, ta.TwoPlayerState):
            raise ValueError(f"textarena {env_id} is not a two-player game")
        self.env.state.error_allowance = 10**9  # reinforge's max_illegal_moves decides, not textarena's limit
        self.names = dict(self.env.state.role_mapping)

    def _call(self, fn: Callable, *args, **kwargs):
        outer = random.getstate()
        random.setstate(self._random)
        try:
            return fn(*args, **kwargs)
        finally:
            self._random = random.getstate()
            random.setstate(outer)

    @property
    def to_move(self) -> int:
        return self.env.state.current_player_id

    @property
    def done(self) -> bool:
        return bool(self.env.state.done)

    def step(self, text: str) -> bool:
        """Play `text` for the player to move; whether textarena took it as a valid move (a valid
        move advances its turn counter, an invalid one does not)."""
        turn = self.env.state.turn
        self._call(self.env.step, text)
        return self.env.state.turn > turn

    def take_messages(self, player: int) -> list[str]:
        """What textarena queued for `player` since its last turn, one line per message."""
        queued = self.env.state.observations[player]
        self.env.state.observations[player] = []
        return [f"[{self.names.get(sender, sender)}] {message}" for sender, message, _ in queued]

    def rewards(self) -> tuple[float, float]:
        rewards = self.env.state.rewards or {}
        return (float(rewards.get(0, 0.0)), float(rewards.get(1, 0.0)))


class TextArenaGame(Game):
    """A textarena two-player game; its "state" is the ArenaTable in play (not searchable, so
    no perfect player: `perfect_information` is False for all of them here)."""

    roles = ("player0", "player1")
    perfect_information = False

    def __init__(self, env_id: str):
        self.env_id = env_id
        self.name = f"textarena:{env_id}"
        self.max_moves, self._legal = LEGAL_MOVES[env_id]

    def initial_state(self, rng: random.Random) -> ArenaTable:
        return ArenaTable(self.env_id, rng.randrange(2**31))

    @property
    def referee(self) -> type:
        return ArenaMatch

    def to_move(self, state: ArenaTable) -> int:
        return state.to_move

    def legal_moves(self, state: ArenaTable) -> list[str]:
        return [] if state.done else self._legal(state.env)

    def play(self, state: ArenaTable, move: str) -> ArenaTable:
        if not state.step(move):
            raise ValueError(f"textarena {self.env_id} rejected the move {move!r}")
        return state

    def is_over(self, state: ArenaTable) -> bool:
        return state.done

    def payoffs(self, state: ArenaTable) -> tuple[float, float]:
        return state.rewards()

    def rules(self, player: int) -> str:
        return ""  # textarena's own prompt is the first message it queues for each player

    def view(self, state: ArenaTable, player: int) -> str:
        return "\n".join(state.take_messages(player))

    def announce(self, state: ArenaTable, mover: int, move: str, observer: int) -> str:
        return ""  # textarena queues what each observer learns

    def parse_move(self, text: str) -> str:
        return text


@dataclass(eq=False)
class ArenaMatch(Match):
    """games.match.Match with textarena judging the moves and writing every message."""

    def message(self, player: int) -> str:
        self.started[player] = True
        return self.game.view(self.state, player)

    def submit(self, player: int, text: str) -> bool:
        if self.over or player != self.to_move:
            raise RuntimeError(f"player {player} cannot move now (over={self.over}, to move={self.to_move})")
        self.turns += 1
        legal = self.state.step(text)  # an illegal move: textarena queues its reason for the player
        self.log.append({"player": player, "text": text, "legal": legal})
        if legal:
            self.moves += 1
            if self.state.done:
                self.finish_reason = FINISHED
        else:
            self.illegal[player] += 1
            if self.illegal[player] >= self.rules.max_illegal_moves:
                self.finish_reason, self.forfeit = "illegal_moves", player
        if not self.over and self.turns >= self.rules.max_turns:
            self.finish_reason = "max_turns"
        return legal


def textarena_game(env_id: str) -> TextArenaGame:
    """The adapter for `env_id`; ValueError (naming the extra, or the supported ids) otherwise."""
    if env_id not in LEGAL_MOVES:
        raise ValueError(
            f"textarena game {env_id!r} is not supported; supported (offline, two players): "
            f"{', '.join('textarena:' + k for k in LEGAL_MOVES)}"
        )
    import_textarena()  # the error naming the extra when it is missing
    from textarena.envs.registration import ENV_REGISTRY

    if f"{env_id}-raw" not in ENV_REGISTRY:
        raise ValueError(f"the installed textarena has no env {env_id!r}")
    return TextArenaGame(env_id)
