"""Tasks from local data files through the Hugging Face `datasets` library (task.source=hf_dataset).

`task.path` (and `task.eval_path`) names a Parquet, Arrow, CSV, JSON or JSONL file, a glob or
a directory of such files, or a `save_to_disk` directory: local paths only (`local_data.py` reads
them). docs/datasets.md is the user's guide.

`task.split` picks the training split (default: train, or the only split there is);
`task.eval_split` a held-out split, of `task.eval_path` when it is set and of `task.path`
otherwise; without either, `task.eval_size` tasks are split off the training split as the JSONL
source does (`records.hold_out_tasks`).

Each row is one task. Columns are mapped by `task.prompt_field` (text or chat messages),
`task.answer_field`, and optionally `task.id_field` and `task.solution_field` (the warm-up
demonstration: text, or the chat messages that follow the prompt). `task.messages_field` reads a
whole conversation from one column instead: its leading system and user messages are the prompt,
the rest (assistant turns with `tool_calls`, role "tool" results) the demonstration, and without
an answer column the last assistant message is the answer. Every other column goes to
`Task.metadata` (a `family` column groups evaluation reports, as in JSONL).

`task.answer_format: gsm8k` reads GSM8K-style answers, a worked solution ending in `#### 72`:
the reference answer is `72` and the warm-up demonstration is the worked solution with its last
line written `<answer>72</answer>`, the form every verifier reads an answer from (a model
imitating `#### 72` would never be scored right). `task.verifier` applies to every task (default
numeric for gsm8k, else exact).

Everything is read and checked in `check`, before any model is loaded: a missing file, an unknown
split or column (the message lists the ones there are), an empty split, a null prompt or answer
(named by split and row, counting from 0) are ConfigErrors.
"""

from __future__ import annotations

from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.local_data import open_splits, pick_split
from reinforge.tasks.records import (
    check_verifier,
    fail,
    final_answer_text,
    hold_out_tasks,
    parse_answer,
    parse_demonstration,
    parse_id,
    parse_prompt,
    split_conversation,
)
from reinforge.tasks.task import Task, TaskSplits

# Keys only this source reads; the JSONL source refuses them rather than ignore them.
SOURCE_KEYS = (
    "split", "eval_split", "prompt_field", "answer_field", "id_field", "solution_field", "messages_field",
    "answer_format", "verifier",
)
GSM8K_MARK = "####"

# --------------------------------------------------------------------------- rows to tasks


def split_gsm8k(text: str, where: str, label: str) -> tuple[str, str]:
    """("72", "worked solution\\n<answer>72</answer>") from "worked solution\\n#### 72"."""
    worked, mark, final = text.rpartition(GSM8K_MARK)
    if not mark:
        raise fail(where, f"{label} has no '{GSM8K_MARK} ' final answer (task.answer_format=gsm8k): {text[-80:]!r}")
    answer = final.strip()
    if not answer:
        raise fail(where, f"{label} has nothing after '{GSM8K_MARK}' (task.answer_format=gsm8k)")
    worked = worked.rstrip()
    return answer, (f"{worked}\n" if worked else "") + f"<answer>{answer}</answer>"


def _columns(cfg: TaskConfig, available: list[str], where: str) -> dict[str, str]:
    """Config key -> column, each checked to exist (the error lists the columns there are)."""
    wanted = {"messages_field": cfg.messages_field} if cfg.messages_field else {"prompt_field": cfg.prompt_field}
    # A conversation carries its answer; an answer column is then optional unless named explicitly.
    if not cfg.messages_field or cfg.answer_field in available or "answer_field" in cfg.model_fields_set:
        wanted["answer_field"] = cfg.answer_field
    for key in ("id_field", "solution_field"):
        if getattr(cfg, key) is not None:
            wanted[key] = getattr(cfg, key)
    for key, column in wanted.items():
        if column not in available:
            raise ConfigError(f"task.{key}: no column {column!r} in {where}; its columns: {', '.join(available)}")
    return wanted


def _answer(row: dict, columns: dict[str, str], cfg: TaskConfig, demonstration, where: str) -> tuple[str, str | list[dict] | None]:
    """The reference answer, and the demonstration once the answer format has had its say: from the
    answer column, else from the conversation's last assistant message."""
    gsm8k = cfg.answer_format == "gsm8k"
    if "answer_field" in columns:
        label = f"column {columns['answer_field']!r}"
        answer = parse_answer(row[columns["answer_field"]], where, label)
        if not gsm8k:
            return answer, demonstration
        answer, worked = split_gsm8k(answer, where, label)
        return answer, demonstration if demonstration is not None else worked
    answer = final_answer_text(demonstration)
    if gsm8k:
        answer, worked = split_gsm8k(answer, where, "the last assistant message")
        if isinstance(demonstration, str):
            demonstration = worked
        else:
            demonstration = [*demonstration[:-1], {**demonstration[-1], "content": worked}]
    if not answer.strip():
        raise fail(
            where, f"the last assistant message of column {columns['messages_field']!r} is empty, so there is no answer; "
            "name an answer column with task.answer_field",
        )
    return answer, demonstration


def _row_task(row: dict, columns: dict[str, str], cfg: TaskConfig, verifier: str, where: str, default_id: str) -> Task:
    demonstration: str | list[dict] | None = None
    if "messages_field" in columns:
        prompt, demonstration = split_conversation(row[columns["messages_field"]], where, f"column {columns['messages_field']!r}")
    else:
        prompt = parse_prompt(row[columns["prompt_field"]], where, f"column {columns['prompt_field']!r}")
    answer, demonstration = _answer(row, columns, cfg, demonstration, where)
    if "solution_field" in columns:
        solution = parse_demonstration(row[columns["solution_field"]], where, f"column {columns['solution_field']!r}")
        demonstration = solution if solution is not None else demonstration
    task_id = parse_id(row[columns["id_field"]], where, f"column {columns['id_field']!r}") if "id_field" in columns else default_id
    if "family" in row and (not isinstance(row["family"], str) or not row["family"].strip()):
        raise fail(where, f"column 'family' must be a non-empty string, got {row['family']!r}")
    used = set(columns.values())
    return Task(
        id=task_id,
        prompt=prompt,
        answer=answer,
        verifier=check_verifier(verifier, answer, where),
        demonstration=demonstration,
        metadata={k: v for k, v in row.items() if k not in used},
    )


def read_split(data: Any, cfg: TaskConfig, where: str, id_prefix: str) -> list[Task]:
    """The tasks of one split; `where` names it ("task.path FILE, split 'train'") in every error."""
    if len(data) == 0:
        raise ConfigError(f"{where} is empty: no rows, so no tasks")
    columns = _columns(cfg, list(data.column_names), where)
    verifier = cfg.verifier or ("numeric" if cfg.answer_format == "gsm8k" else "exact")
    tasks: list[Task] = []
    first_row: dict[str, int] = {}
    for index, row in enumerate(data):
        row_where = f"{where}, row {index}"
        task = _row_task(row, columns, cfg, verifier, row_where, default_id=f"{id_prefix}{index}")
        if task.id in first_row:
            raise fail(row_where, f"duplicate id {task.id!r} (first in row {first_row[task.id]})")
        first_row[task.id] = index
        tasks.append(task)
    return tasks


# --------------------------------------------------------------------------- the source


def _require_path(cfg: TaskConfig) -> str:
    if cfg.path is None:
        raise ConfigError("task.path: source=hf_dataset needs a local data file, glob or directory (see docs/datasets.md)")
    return cfg.path


def read(cfg: TaskConfig) -> tuple[list[Task], list[Task] | None]:
    """Training tasks, and the held-out tasks when a split or file is named for them."""
    path = _require_path(cfg)
    splits = open_splits(path, "task.path")
    name = pick_split(splits, cfg.split, "task.split", path, default="train")
    train = read_split(splits[name], cfg, f"task.path {path}, split {name!r}", id_prefix=f"{name}/")
    if cfg.eval_path is not None:
        eval_splits = open_splits(cfg.eval_path, "task.eval_path")
        eval_name = pick_split(eval_splits, cfg.eval_split, "task.eval_split", cfg.eval_path, default=None)
        where = f"task.eval_path {cfg.eval_path}, split {eval_name!r}"
        return train, read_split(eval_splits[eval_name], cfg, where, id_prefix=f"eval/{eval_name}/")
    if cfg.eval_split is not None:
        eval_name = pick_split(splits, cfg.eval_split, "task.eval_split", path, default=None)
        if eval_name == name:
            raise ConfigError(
                f"task.eval_split: {eval_name!r} is also the training split (task.split); hold out another split, "
                "or leave task.eval_split unset to split task.eval_size tasks off the training split"
            )
        return train, read_split(splits[eval_name], cfg, f"task.path {path}, split {eval_name!r}", id_prefix=f"{eval_name}/")
    return train, None


def check(cfg: TaskConfig) -> None:
    """Read and parse everything: the only way to find a null answer in row 9000 before the model."""
    if cfg.verifier is not None:
        check_verifier(cfg.verifier, "0", "task.verifier")
    read(cfg)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    """Train and held-out tasks (see the module docstring); `task.train_size` does not apply."""
    train, held_out = read(cfg)
    return hold_out_tasks(train, held_out, cfg, seed)
