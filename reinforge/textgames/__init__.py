"""Single-agent text games in the style of LMRL-Gym: Wordle, twenty questions, a text maze (docs/games.md)."""
