"""Tasks from JSONL files: bring your own problems.

One JSON object per line:

    {"prompt": "2+2=", "answer": 4}
    {"id": "q7", "prompt": [{"role": "user", "content": "Capital of France?"}], "answer": "Paris",
     "solution": "The capital is <answer>Paris</answer>", "verifier": "exact", "topic": "geo"}

`prompt` (text or chat messages) and `answer` (any JSON scalar but null) are required; `id`,
`solution` (the supervised warm-up target) and `verifier` (default "exact") are optional; any
other field goes to `Task.metadata`, among them `family` (a string that groups tasks in
evaluation reports; tasks without one are in family "all"). `solution` is text, or for a
multi-turn env (env.type=tool) the chat messages that follow the prompt, in Hugging Face format
with `tool_calls` and role "tool" messages (see `reinforge.tasks.records`, shared with the
`hf_dataset` source, which also reads whole conversations from one column). Blank lines are
skipped. Every malformed line is reported as a ConfigError naming the file and the line, before
any model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.hf_dataset_source import SOURCE_KEYS  # imports `datasets` only when it reads data
from reinforge.tasks.records import check_verifier, fail, hold_out_tasks, parse_answer, parse_demonstration, parse_id, parse_prompt
from reinforge.tasks.task import Task, TaskSplits

RESERVED_FIELDS = ("id", "prompt", "answer", "solution", "verifier")


def _parse_line(record: Any, path: Path, lineno: int) -> Task:
    where = f"{path}:{lineno}"
    if not isinstance(record, dict):
        raise fail(where, f"expected a JSON object, got {type(record).__name__}")
    for required in ("prompt", "answer"):
        if required not in record:
            raise fail(where, f"missing required field {required!r}")
    prompt = parse_prompt(record["prompt"], where)
    answer = parse_answer(record["answer"], where)
    task_id = parse_id(record.get("id", f"{path.stem}:{lineno}"), where)
    solution = parse_demonstration(record.get("solution"), where)
    verifier = check_verifier(record.get("verifier", "exact"), answer, where)
    family = record.get("family", "all")
    if not isinstance(family, str) or not family.strip():
        raise fail(where, f"'family' must be a non-empty string, got {family!r}")

    return Task(
        id=task_id,
        prompt=prompt,
        answer=answer,
        verifier=verifier,
        demonstration=solution,
        metadata={k: v for k, v in record.items() if k not in RESERVED_FIELDS},
    )


def read_tasks(path: str | Path) -> list[Task]:
    """Parse one JSONL file into tasks; any problem is a ConfigError with file and line."""
    return [task for _, task in read_numbered_tasks(path)]


def check_task_file(path: str | Path) -> Path:
    """The file is there (checked before anything heavy is imported, and again when it is read)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"task file {path} is a directory; task.path and task.eval_path each name one JSONL file")
    if not path.is_file():
        raise ConfigError(f"task file {path} does not exist")
    return path


def read_numbered_tasks(path: str | Path) -> list[tuple[int, Task]]:
    """The tasks of one JSONL file, each with its line number (for messages that name the line)."""
    path = check_task_file(path)
    tasks: list[tuple[int, Task]] = []
    seen_ids: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise fail(f"{path}:{lineno}", f"not valid UTF-8 ({err.reason})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise fail(f"{path}:{lineno}", f"invalid JSON: {err.msg} (column {err.colno})") from None
            task = _parse_line(record, path, lineno)
            if task.id in seen_ids:
                raise fail(f"{path}:{lineno}", f"duplicate id {task.id!r} (first on line {seen_ids[task.id]})")
            seen_ids[task.id] = lineno
            tasks.append((lineno, task))
    if not tasks:
        raise ConfigError(f"task file {path} contains no tasks")
    return tasks


def _require_path(cfg: TaskConfig) -> str:
    if cfg.path is None:
        raise ConfigError("task.path: source=jsonl needs the path of a JSONL file of training tasks")
    return cfg.path


def _refuse_other_sources_keys(cfg: TaskConfig) -> None:
    """A column mapping set for source=hf_dataset would be silently ignored here: say so."""
    for key in SOURCE_KEYS:
        if getattr(cfg, key) != TaskConfig.model_fields[key].default:
            raise ConfigError(
                f"task.{key} applies to source=hf_dataset only; a JSONL file's fields are fixed (prompt, answer, id, solution, "
                "verifier): rename them in the file, or set task.source=hf_dataset, which reads JSONL files too"
            )


def check(cfg: TaskConfig) -> None:
    """Parse the file(s) fully: parsing is cheap and it is the only way to find a bad line 9000."""
    _refuse_other_sources_keys(cfg)
    read_tasks(_require_path(cfg))
    if cfg.eval_path is not None:
        read_tasks(cfg.eval_path)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    """Train and held-out tasks: with `task.eval_path`, that whole file is held out; without it,
    `task.eval_size` tasks (at most half the file) are drawn with the seed (see
    `records.hold_out_tasks`, which also drops training prompts that are held out). `task.train_size`
    does not apply: the file is the training set.
    """
    train = read_tasks(_require_path(cfg))
    held_out = read_tasks(cfg.eval_path) if cfg.eval_path is not None else None
    return hold_out_tasks(train, held_out, cfg, seed)
