"""The task source of this example: one task per hidden word, and a scripted player's games.

The words are random three-letter strings ("qzk"), thousands of them: a tiny model could learn a
few dozen real words by heart, but with these it has to learn the game itself (guess the letters
the prompt lists, then say the word the replies revealed), which is what held-out words measure.
Each task's answer is the word (the env reads it from reset's `options`, and evaluation checks
that the last turn says it). Its demonstration is a game as the warm-up teaches it: guess the
letters the prompt lists, one per turn, read the env's replies, then say the revealed word. The replies are
the env's own (played against Hangman), so the warm-up shows exactly what the env will answer.
Held-out words are never trained on.
"""

from __future__ import annotations

import random
import string

from hangman import Hangman
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


def random_words(n: int, rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.sample(string.ascii_lowercase, 3))] = None
    return list(words)


def load(cfg, seed: int) -> TaskSplits:
    words = random_words(cfg.train_size + cfg.eval_size, random.Random(seed))
    train_words, eval_words = words[: cfg.train_size], words[cfg.train_size :]  # disjoint

    def task(word: str) -> Task:
        prompt, _ = Hangman().reset(options={"answer": word})
        return Task(id=word, prompt=prompt, answer=word, demonstration=scripted_game(word))

    return TaskSplits(train=[task(w) for w in train_words], eval=[task(w) for w in eval_words])
