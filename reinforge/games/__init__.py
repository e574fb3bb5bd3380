"""Multi-player text games: rules (game.py and one file per game), the referee (match.py), fixed
opponents, the batched multi-game rollout (play.py), the `game` task source and env, and the
evaluation against fixed opponents. docs/games.md shows how to train on them."""
