"""The `text_game` task source: a task is one puzzle of a single-agent text game, by its seed.

Each task stores the puzzle's seed (`metadata["puzzle_seed"]`): the env deals the same puzzle
from it in every episode of the task's group. Its prompt is the puzzle's first message, its
answer the solution (for records only: the env judges the game), and its demonstration a game of
the teacher (`Puzzle.teacher_move`, with `teacher_noise` random moves) as the env would answer it,
which the warm-up imitates. Held-out tasks use seeds drawn after the training ones.
"""

from __future__ import annotations

import random

from reinforge.config import ConfigError, TaskConfig
from reinforge.textgames.game import Puzzle, TextGame
from reinforge.textgames.spec import TextGameSpec, TextGameSpecError, parse_spec
from reinforge.tasks.task import Task, TaskSplits


def check(cfg: TaskConfig) -> None:
    spec_of(cfg)


def spec_of(cfg: TaskConfig) -> tuple[TextGameSpec, TextGame]:
    try:
        return parse_spec(cfg.params)
    except TextGameSpecError as err:
        raise ConfigError(str(err)) from None


def demonstration(puzzle: Puzzle, rng: random.Random, noise: float) -> list[dict]:
    """The teacher's game as the messages after the prompt: its moves and the env's answers."""
    messages: list[dict] = []
    while not puzzle.over:
        move = puzzle.teacher_move(rng, noise)
        attempt = puzzle.attempt(move)
        if not attempt.legal:  # a teacher bug; never demonstrate an illegal move
            raise RuntimeError(f"the {type(puzzle).__name__} teacher played the illegal move {move!r}: {attempt.feedback}")
        messages.append({"role": "assistant", "content": move})
        if not puzzle.over:
            messages.append({"role": "user", "content": attempt.feedback})
    return messages


def puzzle_task(task_id: str, spec: TextGameSpec, game: TextGame, seed: int, family: str) -> Task:
    puzzle = game.new_puzzle(random.Random(seed))
    intro, answer = puzzle.intro(), puzzle.answer
    return Task(
        id=task_id,
        prompt=[{"role": "user", "content": intro}],
        answer=answer,
        demonstration=demonstration(puzzle, random.Random(f"teacher-{seed}"), spec.teacher_noise),
        metadata={"family": family, "text_game": spec.model_dump(), "puzzle_seed": seed},
    )


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    spec, game = spec_of(cfg)
    rng = random.Random(seed)
    seeds = rng.sample(range(2**31), cfg.train_size + cfg.eval_size)  # distinct: no held-out puzzle seed is trained on
    train = [puzzle_task(f"{game.name}/train/{i}", spec, game, s, game.name) for i, s in enumerate(seeds[: cfg.train_size])]
    held_out = [puzzle_task(f"{game.name}/eval/{i}", spec, game, s, game.name) for i, s in enumerate(seeds[cfg.train_size :])]
    return TaskSplits(train=train, eval=held_out)
