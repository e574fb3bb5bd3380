"""The task source of this example: one task per hidden word, and a scripted player's games.

Each task's answer is the word (the env reads it from reset's `options`, and evaluation checks
that the last turn says it). Its demonstration is a game as the warm-up teaches it: guess the
letters the prompt lists, one per turn, read the env's replies, then say the revealed word. The replies are
the env's own (played against Hangman), so the warm-up shows exactly what the env will answer.
Held-out words are never trained on.
"""

from __future__ import annotations

import random

from hangman import WORDS, Hangman
from reinforge.tasks.task import Task, TaskSplits


def scripted_game(word: str) -> list[dict]:
    env = Hangman()
    env.reset(options={"answer": word})
    messages = []
    for guess in [*sorted(set(word)), word]:
        reply, *_ = env.step(guess)
        messages.append({"role": "assistant", "content": guess})
        messages.append({"role": "user", "content": reply})
    return messages[:-1]  # the game ends on the word: no reply after it


def load(cfg, seed: int) -> TaskSplits:
    words = list(WORDS)
    random.Random(seed).shuffle(words)
    held_out = cfg.eval_size if cfg.eval_size < len(words) // 2 else len(words) // 4
    eval_words, train_words = words[:held_out], words[held_out:]

    def task(word: str, n: int) -> Task:
        prompt, _ = Hangman().reset(options={"answer": word})
        return Task(id=f"{word}-{n}", prompt=prompt, answer=word, demonstration=scripted_game(word))

    # the training words repeated up to task.train_size tasks (a game is short; words are few)
    train = [task(train_words[n % len(train_words)], n) for n in range(cfg.train_size)]
    return TaskSplits(train=train, eval=[task(w, 0) for w in eval_words])
