"""Guess the number: a multi-turn environment written against reinforge's Env protocol.

The policy guesses a secret number; the env answers "higher" or "lower" as a user turn, until the
guess is right (the episode ends, solved) or the env's `max_turns` guesses are used up. The
policy's last turn is its final guess, which the task's `numeric` verifier checks in evaluation.

What the protocol asks of an env (reinforge/envs/base.py), and how this file meets it:

- `tokenizer`, `stop_token_ids`, `max_turns`: attributes;
- `prompt_ids(task)`: the prompt in tokens, rendered once with the tokenizer's chat template;
- `episode()`: a fresh episode whose `reset(task)` returns the prompt's ids and whose
  `step(turn_text, finish_reason)` returns a `StepResult` (the reply's token ids, done, counters);
- `sft_example(task)`: the task's demonstration in tokens and which tokens are trained, for the
  supervised warm-up; `decode_response(ids)`: a sampled turn as text.

Tokens: the env never re-tokenizes what the policy wrote. reinforge's `ChatFormat` renders the
env's replies ("higher") as the exact tokens the chat template writes between two assistant
turns, and the warm-up's demonstrations with the same helper, so that warm-up and RL see the
same token sequences.
"""

from __future__ import annotations

import re

from reinforge.envs.base import StepResult
from reinforge.envs.chat_format import ChatFormat
from reinforge.tasks.task import Task

NUMBER = re.compile(r"-?\d+")


class GuessNumberEnv:
    """Built by reinforge as `GuessNumberEnv(tokenizer, **env.params)` (recipe: env.type, env.params)."""

    def __init__(self, tokenizer, max_turns: int = 5):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.chat = ChatFormat(tokenizer)
        # A turn ends with the template's end-of-turn token (or end of sequence).
        self.stop_token_ids = tuple(dict.fromkeys([self.chat.end_of_turn_id, tokenizer.eos_token_id]))

    def prompt_ids(self, task: Task) -> list[int]:
        return self.chat.prompt_ids([{"role": "user", "content": task.prompt}])

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def episode(self) -> GuessEpisode:
        return GuessEpisode(self)

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        """Prompt, then the demonstration: guesses trained (each closed by the end-of-turn token),
        the env's replies in between as the observations an episode would append."""
        return self.chat.demonstration_ids(self.prompt_ids(task), task.demonstration)


class GuessEpisode:
    """One game: the secret, and nothing else (the rollout loop keeps the tokens and the turn count)."""

    def __init__(self, env: GuessNumberEnv):
        self.env = env
        self.secret: int | None = None

    def reset(self, task: Task) -> list[int]:
        self.secret = int(task.answer)
        return self.env.prompt_ids(task)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        match = NUMBER.fullmatch(turn_text.strip())
        if match is None or finish_reason == "length":
            reply, counts = "say one number", {"invalid_guesses": 1}
        elif int(match.group()) == self.secret:
            # The episode ends. `info` counters are summed over the episode into the trajectory's
            # `stats` (written with each sample in samples.jsonl).
            return StepResult(done=True, info={"finish_reason": "stop", "solved": 1})
        else:
            reply, counts = ("higher" if self.secret > int(match.group()) else "lower"), {"wrong_guesses": 1}
        return StepResult(
            observation_ids=self.env.chat.observation_ids([{"role": "user", "content": reply}]),
            done=False,
            info=counts,
            observation_text=reply,
        )
