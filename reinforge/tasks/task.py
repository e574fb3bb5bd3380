"""The Task type: one problem the policy is asked to solve."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

# A prompt is either plain text or a list of chat messages ({"role": ..., "content": ...}).
Prompt = str | list[dict[str, str]]

# Where a verifier finds the final answer in a response (reinforge.tasks.answer_extraction); the
# names are listed here, below the rewards that implement them, so that a Task can check its own.
ANSWER_EXTRACTORS = ("response", "auto", "answer_tags", "boxed", "gsm8k", "last_number")


@dataclass
class Task:
    """One problem.

    `answer` is the reference the verifier checks against; `verifier` names the check in
    `reinforge.tasks.verifiers`; `demonstration` is a worked completion for supervised warm-up
    (None means: use `answer`): a string, or for multi-turn envs the messages that follow the
    prompt in Hugging Face chat format (assistant turns, with `tool_calls` as
    [{"type": "function", "function": {"name", "arguments"}}], and tool results as role "tool"
    messages). `metadata` carries whatever a source's verifier needs. `answer_extractor` says
    where the verifier finds the final answer in a response (one of ANSWER_EXTRACTORS;
    `task.answer_extractor` in the config sets it for every task of a run).
    """

    id: str
    prompt: Prompt
    answer: str
    verifier: str = "exact"
    demonstration: str | list[dict] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    answer_extractor: str = "response"

    def __post_init__(self) -> None:
        if self.answer_extractor not in ANSWER_EXTRACTORS:
            raise ValueError(
                f"task {self.id!r}: unknown answer_extractor {self.answer_extractor!r}; valid: {', '.join(ANSWER_EXTRACTORS)}"
            )

    @property
    def sft_target(self) -> str | list[dict]:
        return self.demonstration if self.demonstration is not None else self.answer


def message_text(message: dict) -> str:
    """A chat message's content and its tool calls' names and arguments, as plain text (for
    training a tokenizer on what the model will read and write)."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        parts.append(f"<<{function.get('name')}: {' '.join(map(str, arguments.values())) if isinstance(arguments, dict) else arguments}>>")
    return " ".join(p for p in parts if p)


def task_text(task: Task) -> str:
    """Prompt and demonstration of `task` as one plain text."""
    prompt = task.prompt if isinstance(task.prompt, str) else " ".join(message_text(m) for m in task.prompt)
    target = task.sft_target
    return prompt + " " + (target if isinstance(target, str) else " ".join(message_text(m) for m in target))


@dataclass
class TaskSplits:
    """Training tasks and held-out tasks, disjoint."""

    train: list[Task]
    eval: list[Task]


def hold_out(tasks: list[Task], eval_size: int, seed: int) -> tuple[list[Task], list[Task]]:
    """(train, held_out): `eval_size` tasks (at most half) drawn with `random.Random(seed)`; both
    keep the input order."""
    n_eval = min(eval_size, len(tasks) // 2)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    eval_indices = set(order[:n_eval])
    return [t for i, t in enumerate(tasks) if i not in eval_indices], [t for i, t in enumerate(tasks) if i in eval_indices]


def drop_held_out_prompts(train: list[Task], held_out: list[Task]) -> list[Task]:
    """Training tasks whose prompt is not also held out, so evaluation never measures memorisation."""
    held = {json.dumps(t.prompt, sort_keys=True) for t in held_out}
    return [t for t in train if json.dumps(t.prompt, sort_keys=True) not in held]
