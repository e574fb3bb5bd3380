"""The Task type: one problem the policy is asked to solve."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A prompt is either plain text or a list of chat messages ({"role": ..., "content": ...}).
Prompt = str | list[dict[str, str]]


@dataclass
class Task:
    """One problem.

    `answer` is the reference the verifier checks against; `verifier` names the check in
    `reinforge.rewards.verifiers`; `demonstration` is a worked completion for supervised warm-up
    (None means: use `answer`). `metadata` carries whatever a source's verifier needs.
    """

    id: str
    prompt: Prompt
    answer: str
    verifier: str = "exact"
    demonstration: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sft_target(self) -> str:
        return self.demonstration if self.demonstration is not None else self.answer


@dataclass
class TaskSplits:
    """Training tasks and held-out tasks, disjoint."""

    train: list[Task]
    eval: list[Task]
