"""The files a config names, checked before torch is imported.

A missing dataset file or a broken model directory used to be found by the preflight, after the
torch import and the task and model modules it pulls in: 20-70 s for a one-line mistake, where a
pure config error answers in 1-3 s. These checks look only at the file system (exists, is a file
or a directory, a glob matches, a model directory has config.json and weights) with the same
functions and messages the later, full checks use, and import nothing heavy. The full checks
(parsing every task, loading the tokenizer) still run in the preflight.
"""

from __future__ import annotations

from pathlib import Path

from reinforge.config import Config, ConfigError


def check_files_first(cfg: Config) -> None:
    """Task files of the file sources, and a local model directory (see the module docstring)."""
    task = cfg.task
    for key in ("path", "eval_path"):
        value = getattr(task, key)
        if value is None:
            continue
        if task.source == "jsonl":
            from reinforge.tasks.jsonl_source import check_task_file

            check_task_file(value)
        elif task.source == "hf_dataset":
            from reinforge.tasks.local_data import check_data_path

            check_data_path(value, f"task.{key}")
    if cfg.model.path is not None and not _fetched_or_converted(cfg.model.path):
        from reinforge.models.errors import ModelLoadError
        from reinforge.models.model_source import check_model_dir

        try:
            check_model_dir(cfg.model.path, "model.path")
        except ModelLoadError as err:
            message = str(err)
            raise ConfigError(message if message.startswith("model.path") else f"model.path: {message}") from None


def _fetched_or_converted(spec: str) -> bool:
    """A `reinforge model fetch` name or a .gguf file: making its directory is work (a download, a
    conversion), left to the preflight; everything else resolves from the file system or the Hub cache."""
    from reinforge.models.fetch import KNOWN_MODELS

    return spec in KNOWN_MODELS or Path(spec).suffix.lower() == ".gguf"
