"""Small real envs written the way other ecosystems write them (no reinforge import), for the
adapter tests: each keeps its own contract exactly as its ecosystem documents it."""

from __future__ import annotations

import random
import re


class GuessNumber:
    """gymnasium / GEM style: guess a secret number in 1..high, told "higher" or "lower".

    The secret is `options["answer"]` when the task carries one, else drawn from `seed`."""

    def __init__(self, high: int = 20, wrong_guess_reward: float = 0.0):
        self.high, self.wrong_guess_reward = high, wrong_guess_reward
        self.secret = 0

    def reset(self, seed=None, options=None):
        answer = (options or {}).get("answer")
        self.secret = int(answer) if answer else random.Random(seed).randint(1, self.high)
        return f"Guess my number between 1 and {self.high}.", {"secret": self.secret}

    def step(self, action):
        match = re.search(r"-?\d+", action)
        if match is None:
            return "Say a number.", self.wrong_guess_reward, False, False, {}
        guess = int(match.group())
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {}
        return ("higher" if guess < self.secret else "lower"), self.wrong_guess_reward, False, False, {}


class SelfSeededGuess:
    """A gym-style env whose reset takes no seed: it draws from the global `random`."""

    def reset(self):
        self.secret = random.randint(1, 1000)
        return f"Guess ({self.secret % 7})", {}

    def step(self, action):
        return "no", 0.0, False, True, {}


class SkyRLCountdown:
    """SkyRL BaseTextEnv shape: `__init__(env_config, extras)`, `init(prompt)`, `step(action) -> dict`.

    The model must say the target (`extras["reward_spec"]["ground_truth"]`); it gets "again" until
    it does, for at most `env_config["max_turns"]` turns."""

    def __init__(self, env_config=None, extras=None):
        self.max_turns = (env_config or {}).get("max_turns", 3)
        self.target = str(extras["reward_spec"]["ground_truth"])
        self.turns = 0

    def init(self, prompt):
        return [{"role": "system", "content": "Answer with a number."}, *prompt], {}

    def step(self, action):
        self.turns += 1
        correct = action.strip() == self.target
        done = correct or self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "again"}]
        return {"observations": observations, "reward": 1.0 if correct else 0.0, "done": done, "metadata": {}}


class TRLCounter:
    """TRL environment_factory shape: `reset(**kwargs) -> prompt`, public tool methods, `get_reward()`."""

    def __init__(self):
        self.counter = 0
        self.target = 0

    def reset(self, target=None, **kwargs) -> str:
        self.counter = 0
        self.target = int(target) if target is not None else random.randint(1, 6)
        return f"Increment the counter to {self.target}."

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: Value to add to the counter.
        """
        self.counter += step
        return self.counter

    def get_reward(self) -> float:
        return float(self.counter == self.target)


class TRLAsyncCounter(TRLCounter):
    """The same with async tool and reward methods (TRL accepts both)."""

    async def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: Value to add to the counter.
        """
        self.counter += step
        return self.counter

    async def get_reward(self) -> float:
        return float(self.counter == self.target)


class NoStep:
    """Looks like a gym env but has no step()."""

    def reset(self, seed=None):
        return "hi", {}


class BadReset:
    """reset returns a bare string: not the gym (observation, info) pair."""

    def reset(self, seed=None):
        return "hi"

    def step(self, action):
        return "x", 0.0, False, False, {}
