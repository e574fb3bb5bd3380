"""Tasks from JSONL files: bring your own problems.

One JSON object per line:

    {"prompt": "2+2=", "answer": 4}
    {"id": "q7", "prompt": [{"role": "user", "content": "Capital of France?"}], "answer": "Paris",
     "solution": "The capital is <answer>Paris</answer>", "verifier": "exact", "topic": "geo"}

`prompt` (text or chat messages) and `answer` (any JSON scalar but null) are required; `id`,
`solution` (the supervised warm-up target) and `verifier` (default "exact") are optional; any
other field goes to `Task.metadata`, among them `family` (a string that groups tasks in
evaluation reports; tasks without one are in family "all"). Blank lines are skipped. Every malformed line is reported
as a ConfigError naming the file and the line, before any model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.rewards.verifiers import UnknownVerifierError, get_verifier, parse_number
from reinforge.tasks.task import Prompt, Task, TaskSplits, drop_held_out_prompts, hold_out

RESERVED_FIELDS = ("id", "prompt", "answer", "solution", "verifier")


def _fail(path: Path, lineno: int, message: str) -> ConfigError:
    return ConfigError(f"{path}:{lineno}: {message}")


def _parse_prompt(value: Any, path: Path, lineno: int) -> Prompt:
    if isinstance(value, str):
        if not value.strip():
            raise _fail(path, lineno, "'prompt' is empty")
        return value
    if isinstance(value, list) and value:
        for i, message in enumerate(value):
            if (
                not isinstance(message, dict)
                or not {"role", "content"} <= set(message)
                or not all(isinstance(v, str) for v in message.values())
            ):
                raise _fail(path, lineno, f"'prompt' message {i} must be {{\"role\": str, \"content\": str}}, got {message!r}")
        return value
    raise _fail(path, lineno, f"'prompt' must be a string or a non-empty list of chat messages, got {value!r}")


def _parse_answer(value: Any, path: Path, lineno: int) -> str:
    if isinstance(value, str):
        return value
    # JSON spelling, so that `true` stays "true" and not Python's "True".
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise _fail(path, lineno, f"'answer' must be a JSON string, number or boolean, got {value!r}")


def _parse_line(record: Any, path: Path, lineno: int) -> Task:
    if not isinstance(record, dict):
        raise _fail(path, lineno, f"expected a JSON object, got {type(record).__name__}")
    for required in ("prompt", "answer"):
        if required not in record:
            raise _fail(path, lineno, f"missing required field {required!r}")
    prompt = _parse_prompt(record["prompt"], path, lineno)
    answer = _parse_answer(record["answer"], path, lineno)

    task_id = record.get("id", f"{path.stem}:{lineno}")
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
        raise _fail(path, lineno, f"'id' must be a string or integer, got {task_id!r}")
    solution = record.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise _fail(path, lineno, f"'solution' must be a string, got {solution!r}")
    verifier = record.get("verifier", "exact")
    try:
        get_verifier(verifier)  # a built-in name or the user's own by import path
    except UnknownVerifierError as err:
        raise _fail(path, lineno, str(err)) from None
    if verifier == "numeric" and parse_number(answer) is None:
        raise _fail(path, lineno, f"'answer' {answer!r} is not a number but verifier is 'numeric'")
    family = record.get("family", "all")
    if not isinstance(family, str) or not family.strip():
        raise _fail(path, lineno, f"'family' must be a non-empty string, got {family!r}")

    return Task(
        id=str(task_id),
        prompt=prompt,
        answer=answer,
        verifier=verifier,
        demonstration=solution,
        metadata={k: v for k, v in record.items() if k not in RESERVED_FIELDS},
    )


def read_tasks(path: str | Path) -> list[Task]:
    """Parse one JSONL file into tasks; any problem is a ConfigError with file and line."""
    return [task for _, task in read_numbered_tasks(path)]


def read_numbered_tasks(path: str | Path) -> list[tuple[int, Task]]:
    """The tasks of one JSONL file, each with its line number (for messages that name the line)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"task file {path} is a directory; task.path and task.eval_path each name one JSONL file")
    if not path.is_file():
        raise ConfigError(f"task file {path} does not exist")
    tasks: list[tuple[int, Task]] = []
    seen_ids: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise _fail(path, lineno, f"not valid UTF-8 ({err.reason})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise _fail(path, lineno, f"invalid JSON: {err.msg} (column {err.colno})") from None
            task = _parse_line(record, path, lineno)
            if task.id in seen_ids:
                raise _fail(path, lineno, f"duplicate id {task.id!r} (first on line {seen_ids[task.id]})")
            seen_ids[task.id] = lineno
            tasks.append((lineno, task))
    if not tasks:
        raise ConfigError(f"task file {path} contains no tasks")
    return tasks



def _require_path(cfg: TaskConfig) -> str:
    if cfg.path is None:
        raise ConfigError("task.path: source=jsonl needs the path of a JSONL file of training tasks")
    return cfg.path


def check(cfg: TaskConfig) -> None:
    """Parse the file(s) fully: parsing is cheap and it is the only way to find a bad line 9000."""
    read_tasks(_require_path(cfg))
    if cfg.eval_path is not None:
        read_tasks(cfg.eval_path)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    """Train and held-out tasks.

    With `task.eval_path`, that whole file is held out. Without it, `task.eval_size` tasks (at
    most half the file) are drawn with `random.Random(seed)`. Either way, training tasks whose
    prompt also appears among the held-out ones are dropped, so evaluation never measures
    memorisation. Both lists keep file order. `task.train_size` does not apply: the file is
    the training set.
    """
    train = read_tasks(_require_path(cfg))
    if cfg.eval_path is not None:
        held_out = read_tasks(cfg.eval_path)
        ids = {t.id for t in train}
        clash = next((t.id for t in held_out if t.id in ids), None)
        if clash is not None:
            raise ConfigError(f"task id {clash!r} is in both {cfg.path} and {cfg.eval_path}; ids must be unique")
    else:
        train, held_out = hold_out(train, cfg.eval_size, seed)
    train = drop_held_out_prompts(train, held_out)
    if not train:
        raise ConfigError(f"task.path {cfg.path}: every training prompt also appears in the held-out tasks")
    return TaskSplits(train=train, eval=held_out)
