"""The `game` task source: a task is one game setup (who plays each seat, a seed), not a question.

Training tasks cycle through `train_seats`; held-out tasks are each trainable policy against each
evaluation opponent in each seat it plays in training, `eval_games` of each (their family,
"vs-<opponent>", groups the evaluation metrics), and, where several policies play or the game is
cooperative, the trainable players together as they sit in training (family "joint"). Every task carries a warm-up demonstration: a random-legal game as one of the policy's
seats lives it (its messages exactly as the referee writes them), so the warm-up teaches the move
format and the legal moves, not strategy (a game may choose its demonstration moves otherwise:
Game.demonstration_move; describer_guesser plays half of them by a wrong code). The task's prompt
is that seat's first message.
"""

from __future__ import annotations

import random

from reinforge.config import ConfigError, TaskConfig
from reinforge.games.game import Game
from reinforge.games.match import MatchRules, new_match
from reinforge.games.spec import GameSpec, GameSpecError, parse_spec
from reinforge.tasks.task import Task, TaskSplits


def deal_rng(task: Task) -> random.Random:
    """The deal of every training game of `task`, for a game dealt per task (Game.deal_per_task):
    the env deals its games with it, and the prompt-value model reads the same deal (games.value_items)."""
    return random.Random(f"{task.metadata['game_seed']}-deal")


def check(cfg: TaskConfig) -> None:
    spec_of(cfg)


def spec_of(cfg: TaskConfig) -> tuple[GameSpec, Game]:
    try:
        return parse_spec(cfg.params, cfg.policy_names)
    except GameSpecError as err:
        raise ConfigError(str(err)) from None


def demonstration(game: Game, rules: MatchRules, seat: int, rng: random.Random) -> list[dict]:
    """A game of the game's demonstration moves (random-legal unless the game says otherwise) as
    `seat` sees and plays it: its messages and moves, in chat form."""
    match = new_match(game, rules, rng)
    messages: list[dict] = []
    while not match.over:
        mover = match.to_move
        move = game.demonstration_move(match.state, mover, rng)
        if mover == seat:
            messages.append({"role": "user", "content": match.message(seat)})
            messages.append({"role": "assistant", "content": move})
        match.submit(mover, move)
    return messages


def game_task(task_id: str, spec: GameSpec, game: Game, seats: list[str], seed: int, family: str) -> Task:
    policy_seats = [i for i, who in enumerate(seats) if who in spec.policy_names]
    rng = random.Random(f"demo-{seed}")
    demo_seat = policy_seats[seed % len(policy_seats)]
    rules = MatchRules(spec.draw_reward, spec.max_illegal_moves, game.max_moves * 2)
    messages = demonstration(game, rules, demo_seat, rng)
    return Task(
        id=task_id,
        prompt=messages[:1],
        answer="",
        demonstration=messages[1:],
        metadata={
            "family": family,
            "game": game.name,
            "seats": list(seats),
            "policies": spec.policy_names,
            "game_seed": seed,
            "demo_seat": demo_seat,
            "draw_reward": spec.draw_reward,
            "max_illegal_moves": spec.max_illegal_moves,
        },
    )


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    spec, game = spec_of(cfg)
    rng = random.Random(seed)
    train_seats = spec.seats(game)
    train = []
    for i in range(cfg.train_size):
        seats = train_seats[i % len(train_seats)]
        family = "selfplay" if all(w in spec.policy_names for w in seats) else "vs-" + "-".join(w for w in seats if w not in spec.policy_names)
        train.append(game_task(f"{game.name}/train/{i}", spec, game, seats, rng.randrange(2**31), family))
    held_out = []
    for seats, family, label in eval_seatings(spec, game):
        for k in range(spec.eval_games):
            held_out.append(game_task(f"{game.name}/eval/{label}/{k}", spec, game, seats, rng.randrange(2**31), family))
    return TaskSplits(train=train, eval=held_out)


def eval_seatings(spec: GameSpec, game: Game) -> list[tuple[list[str], str, str]]:
    """(seats, family, id label) of every held-out setup: each policy alone against each evaluation
    opponent in every seat it plays in training (one shared policy: every seat), then the joint games."""
    names, train_seats = spec.policy_names, spec.seats(game)
    out = []
    for opponent in spec.opponents(game):
        for policy in names:
            for seat in range(game.num_players):
                if len(names) > 1 and not any(seats[seat] == policy for seats in train_seats):
                    continue
                seats = [opponent] * game.num_players
                seats[seat] = policy
                label = f"{opponent}/{game.roles[seat]}" if len(names) == 1 else f"{opponent}/{policy}-{game.roles[seat]}"
                out.append((seats, f"vs-{opponent}", label))
    if len(names) > 1 or game.cooperative:
        joint = [seats for i, seats in enumerate(train_seats) if all(w in names for w in seats) and seats not in train_seats[:i]]
        if not joint and len(names) == 1:  # a cooperative game's shared policy, with itself
            joint = [[names[0]] * game.num_players]
        for seats in joint:
            out.append((list(seats), "joint", "joint/" + "-".join(seats)))
    return out
