"""What the prompt-value model reads of a game item: one text per trained seat (reinforge.values).

A game's item is a task (who sits where, a seed, for some games a deal). Each of its trained seats
is an outcome of its own (the seat's success over the group's games: reinforge.values.item_seats),
so the value model reads the item once per trained seat, as that seat meets it:
- its rules line (which role it plays: X moves first, the describer sees the secret);
- the table, who plays each seat: the opponent decides most of a seat's result (a random player is
  beaten, a perfect one is not), although the seat itself is never told who it faces;
- where a task fixes the deal (Game.deal_per_task), the seat's own view of it, from the very deal
  its games are played with (the describer's secret). Another seat's hidden information is never
  included: the guesser's text holds no secret, as the guesser's games do not.
The task's own prompt is not used: it is the first message of a warm-up game, of another deal.
"""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.games.env import trainable_players
from reinforge.games.game import Game
from reinforge.games.tasks import deal_rng
from reinforge.tasks.task import Task


@dataclass(frozen=True)
class SeatItem:
    role: str  # the seat's role (Trajectory.agent of its trajectories)
    policy: str  # the trainable policy that plays it
    messages: list[dict]  # what the value model reads, as a chat prompt


def seat_item_text(game: Game, task: Task, seat: int) -> str:
    seats = task.metadata["seats"]
    table = ", ".join(f"{role} {who}" for role, who in zip(game.roles, seats))
    lines = [game.rules(seat), f"Players: {table}."]
    if game.deal_per_task:
        lines.append(game.view(game.initial_state(deal_rng(task)), seat))
    return "\n".join(lines)


def trained_seat_items(game: Game, task: Task) -> list[SeatItem]:
    """The item's trained seats in seat order (frozen players and fixed opponents are not trained)."""
    policies = trainable_players(task)
    return [
        SeatItem(game.roles[seat], who, [{"role": "user", "content": seat_item_text(game, task, seat)}])
        for seat, who in enumerate(task.metadata["seats"]) if who in policies
    ]
