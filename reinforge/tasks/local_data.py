"""Local data files and saved datasets, read into `datasets` splits (for the hf_dataset source).

`open_splits(path)` takes a Parquet, Arrow (IPC stream or file), CSV, JSON or JSONL file, a glob
of files of one format, a directory of such files (splits inferred from the file names by
`datasets`), or a `save_to_disk` directory, and returns its splits by name, held in memory.
Only local paths: nothing is downloaded, and a Hub name is refused with what to do instead.
Every failure is a ConfigError naming the config key and the path; the library's own errors on
empty data ("BatchSize must be greater than 0", StopIteration, ...) are replaced by the plain
reason.
"""

from __future__ import annotations

import contextlib
import glob
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from reinforge.config import ConfigError

# File suffix -> the `datasets` packaged builder that reads it.
BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_GLOB_CHARS = re.compile(r"[*?\[]")


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


def check_data_path(path_text: str, key: str) -> None:
    """Something is there to read at `path_text` (a file, a directory, or a glob that matches a
    file): the check that needs no `datasets` import, made before anything heavy is imported."""
    path = Path(path_text).expanduser()
    if _GLOB_CHARS.search(path_text):
        if not any(Path(f).is_file() for f in glob.iglob(str(path), recursive=True)):
            raise ConfigError(f"{key}: the pattern {path_text} matches no file")
    elif not (path.is_file() or path.is_dir()):
        raise _missing(path_text, key)


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
