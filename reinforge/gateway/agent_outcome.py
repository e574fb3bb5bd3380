"""How one agent episode ended, as the agent process reports it to the trainer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Why an episode has no result; each is counted (env/agent_errors, env/agent_timeouts...).
FAILURE_KINDS = ("raised", "timeout", "none", "unpicklable", "killed")
TRACEBACK_LINES = 8


@dataclass
class AgentOutcome:
    ok: bool
    result: Any = None
    failure: str | None = None  # one of FAILURE_KINDS when not ok
    error: str | None = None  # what to show: the exception and its traceback's last lines, ...
    seconds: float = 0.0

    @classmethod
    def failed(cls, failure: str, error: str) -> "AgentOutcome":
        if failure not in FAILURE_KINDS:
            raise ValueError(f"unknown agent failure {failure!r}; known: {', '.join(FAILURE_KINDS)}")
        return cls(ok=False, failure=failure, error=error)


def last_lines(text: str, n: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])
