"""One game in progress, refereed: whose turn it is, what each player has yet to be told, the result.

The referee works in text only, one message per player per turn: the rules (on the player's first
turn), what happened since its last turn (the other players' moves as `Game.announce` tells them to
it, or that its own move was illegal), and its view of the board (`Game.view`). Those messages are
all a player ever reads, so hidden information cannot leak into another player's tokens.

Simultaneous moves (`Game.round_complete`): the other players' moves of a round are held back and
told only once the round is complete, so a player moving second in a round reads nothing of the
first player's move.

Bad moves: a text that is not a legal move is counted (`illegal_moves`) and told to its player, who
moves again; the player's `max_illegal_moves`-th one ends the game as a loss for it (finish
reason "illegal_moves"). A game still going after `max_turns` turns (every attempt of every player
counts) is cut ("max_turns"); the rollout may cut one whose player ran out of context ("max_tokens").

Rewards: a finished game pays `Game.payoffs`, a draw `draw_reward` to each player (a cooperative
game pays its shared payoffs as they are: its outcome is a win when they are positive, else a loss); a forfeit pays
the forfeiter -max_payoff and the others +max_payoff / (players - 1) (a cooperative game: -max_payoff
to every player, a loss for all); a cut game (no result) pays
`draw_reward` to each, and counts as "unfinished", never as a draw, in the outcome rates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reinforge.games.game import Game, State

FINISHED = "stop"  # the game reached its end by its rules
OUTCOMES = ("win", "draw", "loss", "unfinished")


@dataclass(frozen=True)
class MatchRules:
    draw_reward: float = 0.0
    max_illegal_moves: int = 2
    max_turns: int = 9


@dataclass
class Match:
    game: Game
    rules: MatchRules
    state: State
    turns: int = 0  # attempts of all players, legal or not
    moves: int = 0  # legal moves played
    finish_reason: str | None = None
    forfeit: int | None = None
    inbox: list[list[str]] = field(default_factory=list)
    started: list[bool] = field(default_factory=list)
    illegal: list[int] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)  # every attempt: {"player", "text", "legal"}
    held: list[tuple[int, str]] = field(default_factory=list)  # announcements waiting for the round to close (simultaneous moves)

    def __post_init__(self) -> None:
        n = self.game.num_players
        self.inbox = [[] for _ in range(n)]
        self.started = [False] * n
        self.illegal = [0] * n

    @property
    def over(self) -> bool:
        return self.finish_reason is not None

    @property
    def to_move(self) -> int:
        return self.game.to_move(self.state)

    def message(self, player: int) -> str:
        """Everything `player` is told before its move, and the inbox emptied."""
        lines = [] if self.started[player] else [self.game.rules(player)]
        lines += self.inbox[player]
        lines.append(self.game.view(self.state, player))
        self.started[player] = True
        self.inbox[player] = []
        return "\n".join(lines)

    def submit(self, player: int, text: str) -> bool:
        """`player`'s turn text; returns whether it was a legal move."""
        if self.over or player != self.to_move:
            raise RuntimeError(f"player {player} cannot move now (over={self.over}, to move={self.to_move})")
        self.turns += 1
        move = self.game.parse_move(text)
        legal = move in self.game.legal_moves(self.state)
        self.log.append({"player": player, "text": text, "legal": legal})
        if legal:
            for other in range(self.game.num_players):
                if other != player:
                    self.held.append((other, self.game.announce(self.state, player, move, other)))
            self.state = self.game.play(self.state, move)
            if self.game.round_complete(self.state):  # simultaneous moves: told once all have committed
                for other, text in self.held:
                    self.inbox[other].append(text)
                self.held = []
            self.moves += 1
            if self.game.is_over(self.state):
                self.finish_reason = FINISHED
        else:
            self.illegal[player] += 1
            if self.illegal[player] >= self.rules.max_illegal_moves:
                self.finish_reason, self.forfeit = "illegal_moves", player
            else:
                self.inbox[player].append("Illegal move, try again.")
        if not self.over and self.turns >= self.rules.max_turns:
            self.finish_reason = "max_turns"
        return legal

    def cut(self, reason: str) -> None:
        if not self.over:
            self.finish_reason = reason

    def rewards(self) -> list[float]:
        n = self.game.num_players
        if self.finish_reason == FINISHED:
            payoffs = self.game.payoffs(self.state)
            if self.game.cooperative:  # a shared result, never a draw
                return list(payoffs)
            if all(p == 0 for p in payoffs):
                return [self.rules.draw_reward] * n
            return list(payoffs)
        if self.finish_reason == "illegal_moves":
            best = self.game.max_payoff
            if self.game.cooperative:  # the team lost together
                return [-best] * n
            return [-best if p == self.forfeit else best / (n - 1) for p in range(n)]
        return [self.rules.draw_reward] * n

    def outcome(self, player: int) -> str:
        if self.finish_reason == "illegal_moves":
            return "loss" if player == self.forfeit or self.game.cooperative else "win"
        if self.finish_reason != FINISHED:
            return "unfinished"
        payoff = self.game.payoffs(self.state)[player]
        if self.game.cooperative:
            return "win" if payoff > 0 else "loss"
        return "win" if payoff > 0 else "loss" if payoff < 0 else "draw"


def new_match(game: Game, rules: MatchRules, rng: random.Random) -> Match:
    """A new game (dealt with `rng`) and its referee: the game's own `referee` class, else Match."""
    referee = game.referee or Match
    return referee(game, rules, game.initial_state(rng))
