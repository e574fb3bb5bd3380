"""Ratings of the policy's checkpoints, with the fixed opponents as anchors (OpenSkill).

At every evaluation the policy (the checkpoint of that step) gets a rating from its greedy
evaluation games against the fixed opponents. The anchors are rated once, by games among
themselves (each pair, each seat, `ANCHOR_GAMES` games, no model involved), and then held fixed:
the policy's rating is updated game by game against them, starting from the model's default
(mu 25, sigma 25/3) at every evaluation, so each checkpoint is rated on the same scale and
independently of the others, and two evaluations' ratings can be compared (`rating/mu`).

The rating model is OpenSkill's Plackett-Luce (Weng and Lin 2011, "A Bayesian approximation method
for online ranking", JMLR 12; the `openskill` package, pip install 'reinforge[games]'): a win ranks
the winner first, a draw ties the two, a game without a result (cut, `unfinished`) is not rated.
Logged: `rating/mu`, `rating/sigma`, `rating/ordinal` (mu - 3 sigma, a conservative skill) and
`rating/anchor/<opponent>/mu`; the run report draws them.
"""

from __future__ import annotations

import itertools
import random
from functools import lru_cache

from reinforge.config import ConfigError
from reinforge.games.game import Game
from reinforge.games.match import Match, MatchRules
from reinforge.games.opponents import OPPONENTS
from reinforge.games.registry import get_game

ANCHOR_GAMES = 100  # per ordered pair of anchors: enough to separate random from minimax by ~3 sigma
INSTALL_HINT = "pip install 'reinforge[games]' (the openskill package), or set task.params.ratings=false"


def check_ratings_available() -> None:
    try:
        import openskill  # noqa: F401
    except ImportError:
        raise ConfigError(f"task.params.ratings=true needs the openskill package: {INSTALL_HINT}") from None


def _model():
    from openskill.models import PlackettLuce

    return PlackettLuce()


def ranks(outcome: str) -> list[int] | None:
    """Plackett-Luce ranks of (player, opponent) for the player's `outcome`; None: not rated."""
    return {"win": [0, 1], "draw": [0, 0], "loss": [1, 0]}.get(outcome)


def play_fixed(game: Game, players: list[str], seed: str, max_turns: int) -> str:
    """One game among fixed players; the first seat's outcome."""
    rng = random.Random(seed)
    match = Match(game, MatchRules(max_turns=max_turns), game.initial_state(rng))
    while not match.over:
        seat = match.to_move
        match.submit(seat, OPPONENTS[players[seat]](game, match.state, seat, rng))
    return match.outcome(0)


@lru_cache(maxsize=None)
def anchor_ratings(game_name: str, anchors: tuple[str, ...], seed: int) -> dict[str, tuple[float, float]]:
    """The anchors' (mu, sigma) from games among themselves; deterministic, so computed once per process."""
    game = get_game(game_name)
    model = _model()
    ratings = {name: model.rating(name=name) for name in anchors}
    for first, second in itertools.permutations(anchors, 2):  # each pair, each seat
        for k in range(ANCHOR_GAMES):
            order = ranks(play_fixed(game, [first, second], f"anchor-{seed}-{first}-{second}-{k}", game.max_moves * 2))
            if order is not None:
                [[a], [b]] = model.rate([[ratings[first]], [ratings[second]]], ranks=order)
                ratings[first], ratings[second] = a, b
    return {name: (r.mu, r.sigma) for name, r in ratings.items()}


class CheckpointRatings:
    """The anchors' fixed ratings, and a checkpoint's rating from its results against them."""

    def __init__(self, game: Game, anchors: list[str], seed: int = 0):
        if game.num_players != 2:
            raise ValueError(f"ratings are for two-player games; {game.name} has {game.num_players} players")
        self.model = _model()
        fixed = anchor_ratings(game.name, tuple(anchors), seed)
        self.anchors = {name: self.model.rating(mu=mu, sigma=sigma, name=name) for name, (mu, sigma) in fixed.items()}

    def rate(self, results: list[tuple[str, str]]) -> dict[str, float]:
        """Rating metrics of a checkpoint from its (opponent, outcome) results, anchors held fixed."""
        player = self.model.rating(name="policy")
        for opponent, outcome in results:
            order = ranks(outcome)
            if order is None or opponent not in self.anchors:
                continue
            [[player], _] = self.model.rate([[player], [self.anchors[opponent]]], ranks=order)
        metrics = {"rating/mu": player.mu, "rating/sigma": player.sigma, "rating/ordinal": player.ordinal()}
        metrics.update({f"rating/anchor/{name}/mu": r.mu for name, r in self.anchors.items()})
        return metrics
