"""Rewards for code: run the response's Python against the task's test snippets, in the sandbox.

`task.metadata["tests"]` is a list of Python snippets (usually asserts) and
`task.metadata["test_weights"]` optional weights, one per test. The solution (the last ```python
fence of the response, else the whole response) and every test run in ONE sandbox call, in two
processes: the judge (`code_judge.py`, the sandbox's main program) runs each test snippet itself,
with the solution's names bound to proxies of a separate solution process (`code_server.py`)
that answers with plain data. The verdict is decided and written (`<nonce> <index> <1|0>` on the
judge's stdout) by a process the solution cannot patch, read, signal or write for: patching
`builtins.exec`, exiting early, printing forged results, overriding `__eq__` on what it returns,
or monkeypatching the checks all earn nothing (see code_judge.py for why each fails, and for
the resulting limit: tests compare plain values). A hang keeps the results written so far; the
tests after it fail. A solution that dies is reloaded for the next test.

`DifficultyWeightedTests` weights each test by how often policies have failed it so far, as in
VeRPO (verifiable dense rewards from weighted partial test passing): w_i ∝ (fails_i + 1) /
(attempts_i + 2), the smoothed failure rate, times the task's own weight. A sample is weighted
by the statistics before it, then counted.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import threading
from pathlib import Path

from reinforge.envs.tools.sandbox import SandboxUnavailableError, check_sandbox, run_python
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

_FENCE = re.compile(r"```(?:python|py|python3)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)

# The judge is the sandbox's main program; it starts the solution's process from the server's source.
_JUDGE = (Path(__file__).parent / "code_judge.py").read_text(encoding="utf-8")
_SERVER = (Path(__file__).parent / "code_server.py").read_text(encoding="utf-8")


def extract_code(response: str) -> str:
    """The last ```python fenced block (an unterminated last fence counts), else the response."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def run_tests(task: Task, response: str, timeout_s: float = 5, memory_mb: int = 256) -> list[bool]:
    """Pass/fail of each of the task's tests against the response's code, run in the sandbox."""
    tests = task.metadata.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"task {task.id!r}: metadata['tests'] must be a non-empty list of code strings")
    nonce = secrets.token_hex(16)
    payload = json.dumps({"nonce": nonce, "solution": extract_code(response), "tests": tests, "server": _SERVER})
    result = run_python(_JUDGE, stdin=payload, timeout_s=timeout_s, cpu_s=math.ceil(timeout_s) + 1,
                        memory_mb=memory_mb)
    passed = [False] * len(tests)
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == nonce and parts[1].isdigit() and parts[2] == "1":
            if int(parts[1]) < len(tests):
                passed[int(parts[1])] = True
    return passed


def _task_weights(task: Task, n: int) -> list[float]:
    weights = task.metadata.get("test_weights")
    if weights is None:
        return [1.0] * n
    if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"task {task.id!r}: test_weights must be {n} non-negative numbers, not all 0")
    return [float(w) for w in weights]


def weighted_pass_fraction(passed: list[bool], weights: list[float]) -> float:
    return sum(w for w, ok in zip(weights, passed) if ok) / sum(weights)


class CodeTestsReward:
    """(Weighted) fraction of the task's tests the response's code passes, in [0, 1]."""

    deterministic = True  # a pure function of (task, response) up to timeouts: worth caching

    def __init__(self, timeout_s: float = 5, memory_mb: int = 256):
        try:  # a machine that cannot run the tests (no bwrap; no cgroup and the budget not accepted)
            check_sandbox()  # says so when the reward is built, not as an error on every sample
        except SandboxUnavailableError as err:
            raise ValueError(f"code_tests: {err}") from None
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb

    def score(self, task: Task, response: str) -> float:
        passed = run_tests(task, response, self.timeout_s, self.memory_mb)
        return weighted_pass_fraction(passed, _task_weights(task, len(passed)))

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        return self.score(task, trajectory.response_text)


class DifficultyWeightedTests(CodeTestsReward):
    """Weighted pass fraction with weights that grow on the tests policies keep failing."""

    deterministic = False  # the weights learn from every call

    def __init__(self, timeout_s: float = 5, memory_mb: int = 256):
        super().__init__(timeout_s, memory_mb)
        self._stats: dict[tuple[str, int], list[int]] = {}  # (task id, test) -> [fails, attempts]
        self._lock = threading.Lock()

    def state_dict(self) -> dict:
        """The learned pass statistics: part of a run's checkpoint, so a resumed run weighs alike."""
        with self._lock:
            return {"stats": {key: list(value) for key, value in self._stats.items()}}

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self._stats = {tuple(key): list(value) for key, value in state["stats"].items()}

    def weights(self, task: Task, n: int | None = None) -> list[float]:
        """Current normalized weights of the task's tests."""
        n = len(task.metadata["tests"]) if n is None else n
        base = _task_weights(task, n)
        with self._lock:
            stats = [self._stats.get((task.id, i), [0, 0]) for i in range(n)]
            raw = [b * (fails + 1) / (attempts + 2) for b, (fails, attempts) in zip(base, stats)]
        total = sum(raw)
        return [w / total for w in raw]

    def score(self, task: Task, response: str) -> float:
        passed = run_tests(task, response, self.timeout_s, self.memory_mb)
        reward = weighted_pass_fraction(passed, self.weights(task, len(passed)))
        with self._lock:
            for i, ok in enumerate(passed):
                entry = self._stats.setdefault((task.id, i), [0, 0])
                entry[0] += 0 if ok else 1
                entry[1] += 1
        return reward
