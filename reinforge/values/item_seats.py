"""What the prompt-value model learns from: one outcome per (item, trained seat) of a step.

An item is a training task; the curriculum picks items. Who plays it decides what its outcomes are:
- one player per episode (env.type single_turn, tool, gateway): the item has one seat, and its
  outcome is the group's pass rate, one sample per episode. A gateway agent's episode may come as
  several trajectories (one per piece of a history the agent rewrote, rollout.episode_parts): they
  are one episode, so only its lead piece, which carries the episode's reward, counts; an episode
  whose agent raised or timed out has no outcome (as it has no place in the loss).
- a game (env.type game): each game of the item's group yields one trajectory per trained seat,
  so each trained seat is an outcome of its own: that seat's success averaged over the group's
  games (a self-play game of one policy gives two, X's and O's). The seat is the trajectory's
  `agent` (its role); the value model reads the item as that seat meets it
  (reinforge.games.value_items).
Each seat's outcome trains the value model of the policy that plays it: with several policies,
each has its own (V0 predicts one policy's success from that policy's own states and recent
results; a describer and a guesser find different items hard). PCL then keeps the items whose
trained seats are, on average, predicted nearest the target: a game trains all its seats at once.

A sample's success is the reward (or `prompt_value.component`) clipped to [0, 1]: a game's win 1,
a loss or forfeit 0, a draw its draw reward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reinforge.rollout.episode_parts import agent_failed
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


@dataclass(frozen=True)
class ItemSeat:
    key: str  # pending predictions are keyed by it: the task id, with the role for a game seat
    policy: str
    view: Task  # what the value model reads (its prompt, featurized with the policy's own states)


SeatsOf = Callable[[Task], list[ItemSeat]]


def seat_key(task_id: str, role: str | None) -> str:
    return task_id if role is None else f"{task_id}#{role}"


def one_seat(policy: str) -> SeatsOf:
    """An item of one player per episode: the task itself, played by `policy`."""
    return lambda task: [ItemSeat(task.id, policy, task)]


def game_seats(env) -> SeatsOf:
    """A game item's trained seats (`env`: the GameEnv, which knows the games by name)."""
    from reinforge.games.value_items import trained_seat_items

    cache: dict[str, list[ItemSeat]] = {}

    def seats(task: Task) -> list[ItemSeat]:
        if task.id not in cache:
            cache[task.id] = [
                ItemSeat(seat_key(task.id, s.role), s.policy, Task(id=seat_key(task.id, s.role), prompt=s.messages, answer=""))
                for s in trained_seat_items(env.game(task.metadata["game"]), task)
            ]
        return cache[task.id]

    return seats


def success(trajectory: Trajectory, component: str | None) -> float:
    """A sample's success in [0, 1]: the named component's score, or the total reward, clipped."""
    value = trajectory.reward if component is None else trajectory.rewards[component]
    return min(1.0, max(0.0, float(value)))


def seat_outcomes(trajectories: list[Trajectory], component: str | None) -> dict[tuple[int, str], list[float]]:
    """(group id, seat key) -> the successes of that seat's episodes in the group, in first-seen
    order. Left out: samples whose reward failed (no outcome of the policy's), an agent episode's
    non-lead pieces (the same episode again) and agent episodes without a result."""
    out: dict[tuple[int, str], list[float]] = {}
    for t in trajectories:
        if t.reward_failures or t.episode_part != 0 or agent_failed(t):
            continue
        out.setdefault((t.group_id, seat_key(t.task_id, t.agent)), []).append(success(t, component))
    return out
