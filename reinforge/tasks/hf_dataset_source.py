"""Tasks from local data files through the Hugging Face `datasets` library (task.source=hf_dataset).

`task.path` (and `task.eval_path`) names one of:
- a Parquet, Arrow, CSV, JSON or JSONL file, or a glob of such files (one format);
- a directory of such files, whose splits `datasets` infers from the file names
  (`train-00000-of-00001.parquet`, `test.csv`, `data/validation/*.jsonl`, ...);
- a directory written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`.
Only local paths: nothing is downloaded, and a Hub name is refused with what to do instead.

`task.split` picks the training split (default: train, or the only split there is);
`task.eval_split` a held-out split, of `task.eval_path` when it is set and of `task.path`
otherwise; without either, `task.eval_size` tasks are split off the training split as the JSONL
source does (`records.hold_out`).

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

import contextlib
import glob
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.records import (
    check_verifier,
    fail,
    final_answer_text,
    hold_out,
    parse_answer,
    parse_demonstration,
    parse_id,
    parse_prompt,
    split_conversation,
)
from reinforge.tasks.task import Task, TaskSplits

# File suffix -> the `datasets` packaged builder that reads it.
BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}
# Keys only this source reads; the JSONL source refuses them rather than ignore them.
SOURCE_KEYS = (
    "split", "eval_split", "prompt_field", "answer_field", "id_field", "solution_field", "messages_field",
    "answer_format", "verifier",
)
GSM8K_MARK = "####"
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_GLOB_CHARS = re.compile(r"[*?\[]")


# --------------------------------------------------------------------------- reading the data


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """No progress bars from `datasets` while we read (they would interleave with ours)."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def _missing(path_text: str, key: str) -> ConfigError:
    if _HUB_NAME.match(path_text) and Path(path_text).suffix not in BUILDERS:
        return ConfigError(
            f"{key}: {path_text!r} is not a local file or directory; the hf_dataset source reads local data only and does "
            f"not download from the Hugging Face Hub. Download it where there is a network, e.g. "
            f"datasets.load_dataset({path_text!r}).save_to_disk('my_data'), and set {key} to that directory"
        )
    return ConfigError(f"{key}: no file or directory at {path_text}")


def _builder(files: list[str], key: str, path_text: str) -> str:
    suffixes = {Path(f).suffix.lower() for f in files}
    unknown = sorted(s or "(no suffix)" for s in suffixes if s not in BUILDERS)
    if unknown:
        raise ConfigError(
            f"{key}: {path_text} holds files the hf_dataset source cannot read ({', '.join(unknown)}); it reads "
            f"{', '.join(BUILDERS)} files and save_to_disk directories"
        )
    builders = {BUILDERS[s] for s in suffixes}
    if len(builders) > 1:
        raise ConfigError(f"{key}: {path_text} mixes formats ({', '.join(sorted(suffixes))}); name files of one format")
    return builders.pop()


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _read_error(key: str, path_text: str, err: Exception) -> ConfigError:
    causes = [err]
    while causes[-1].__cause__ is not None and len(causes) < 4:
        causes.append(causes[-1].__cause__)
    why = "; ".join(f"{type(e).__name__}: {_shorten(' '.join(str(e).split()))}" for e in causes)
    # A local copy of a Hub repository declares its configs in README.md; the library then wants
    # one named, which reinforge does by path.
    hint = ""
    if (Path(path_text).expanduser() / "README.md").is_file():
        hint = f"; a copy of a Hub repository with several configs is read one config at a time: set {key} to its folder"
    return ConfigError(f"{key}: the datasets library could not read {path_text} ({why}){hint}")


def _rows_in(file: Path) -> int | None:
    """How many rows a data file holds, read without `datasets`; None when it cannot tell."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    suffix = file.suffix.lower()
    try:
        if suffix == ".parquet":
            return pq.read_metadata(file).num_rows
        if suffix == ".arrow":
            with pa.memory_map(str(file)) as source:
                try:
                    return pa.ipc.open_stream(source).read_all().num_rows
                except pa.ArrowInvalid:
                    return pa.ipc.open_file(source).read_all().num_rows
        lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        if suffix == ".csv":
            return len(lines) - 1 if lines else 0  # the header is not a row
        return 0 if not lines or "".join(lines).strip() == "[]" else None
    except (OSError, ValueError, pa.ArrowException):
        return None


def _empty_saved_splits(folder: Path) -> list[str]:
    """Splits of a save_to_disk directory with no rows, from its own bookkeeping (state.json)."""
    import json

    try:
        if (folder / "state.json").is_file():
            states = {"": folder / "state.json"}
        else:
            splits = json.loads((folder / "dataset_dict.json").read_text())["splits"]
            states = {split: folder / split / "state.json" for split in splits}
        return [split for split, state in states.items() if not json.loads(state.read_text()).get("_data_files")]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _empty_data(path: Path, files: list[str], key: str, path_text: str) -> ConfigError | None:
    """The plain reason when data that `datasets` failed to read is empty: the library fails on
    empty data (each format in its own way: "BatchSize must be greater than 0", StopIteration,
    "list index out of range"), which would otherwise hide it."""
    if files:
        empty = [f for f in files if _rows_in(Path(f)) == 0]
        if empty and len(empty) == len(files):
            return ConfigError(f"{key}: {path_text} is empty: no rows, so no tasks")
        if empty:
            return ConfigError(f"{key}: {empty[0]} has no rows, and the datasets library cannot read an empty file; remove it")
        return None
    empty_splits = _empty_saved_splits(path) if path.is_dir() else []
    if empty_splits == [""]:
        return ConfigError(f"{key}: {path_text} is empty: no rows, so no tasks")
    if empty_splits:
        return ConfigError(
            f"{key}: {path_text}: the saved split(s) {', '.join(map(repr, empty_splits))} are empty, and the datasets "
            "library cannot load a saved DatasetDict with an empty split; save it without them"
        )
    return None


def open_splits(path_text: str, key: str) -> dict[str, Any]:
    """Every split of the data at `path_text`, by name, held in memory (`datasets.Dataset`s).

    The builders' cache goes to a temporary directory removed afterwards: a run reads its data
    once, and nothing is left in the user's home directory."""
    import datasets

    path = Path(path_text).expanduser()
    files: list[str] = []
    try:
        with _quiet_progress(), tempfile.TemporaryDirectory(prefix="reinforge-datasets-") as cache:
            if _GLOB_CHARS.search(path_text):
                files = sorted(f for f in glob.glob(str(path), recursive=True) if Path(f).is_file())
                if not files:
                    raise ConfigError(f"{key}: the pattern {path_text} matches no file")
                loaded = datasets.load_dataset(_builder(files, key, path_text), data_files=files, cache_dir=cache, keep_in_memory=True)
            elif path.is_file():
                files = [str(path)]
                loaded = datasets.load_dataset(_builder(files, key, path_text), data_files=files, cache_dir=cache, keep_in_memory=True)
            elif path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
                loaded = datasets.load_from_disk(str(path), keep_in_memory=True)
            elif path.is_dir():
                files = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix.lower() in BUILDERS)
                if not files:
                    raise ConfigError(
                        f"{key}: the directory {path_text} is not a save_to_disk directory and holds no "
                        f"{', '.join(BUILDERS)} file"
                    )
                loaded = datasets.load_dataset(str(path), cache_dir=cache, keep_in_memory=True)
            else:
                raise _missing(path_text, key)
    except ConfigError:
        raise
    except Exception as err:  # the library raises many kinds (ArrowInvalid, DatasetGenerationError, ...)
        if (empty := _empty_data(path, files, key, path_text)) is not None:
            raise empty from None
        raise _read_error(key, path_text, err) from err
    if isinstance(loaded, datasets.Dataset):  # a saved single Dataset: its own split name, else "train"
        return {str(loaded.split or "train"): loaded}
    return dict(loaded)


def pick_split(splits: dict[str, Any], requested: str | None, key: str, path_text: str, default: str | None) -> str:
    """`requested`, else the only split, else `default`; an unknown name lists the splits there are."""
    names = ", ".join(splits)
    if requested is not None:
        if requested not in splits:
            raise ConfigError(f"{key}: no split {requested!r} in {path_text}; its splits: {names}")
        return requested
    if len(splits) == 1:
        return next(iter(splits))
    if default in splits:
        return default
    raise ConfigError(f"{key}: {path_text} has the splits {names}; set {key} to the one to use")


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
    return hold_out(train, held_out, cfg, seed)
