"""The hf_dataset source: local Parquet / Arrow / CSV / JSON files and saved datasets become Tasks;
every bad input is a ConfigError that names the key, the file, the split, the row or the column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks import hf_dataset_source, registry

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "3+4 = <<3+4=7>>7\n#### 7", "level": "easy"},
    {"question": "A box holds 6 eggs. How many eggs in 2 boxes?", "answer": "6*2 = <<6*2=12>>12\n#### 12", "level": "easy"},
    {"question": "Sam saved 1,000 coins and spent 58. How many are left?", "answer": "1000-58 = 942\n#### 942", "level": "hard"},
    {"question": "What is 42?", "answer": "#### 42", "level": "easy"},
]


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def gsm8k(path: Path, **keys) -> TaskConfig:
    return TaskConfig(source="hf_dataset", path=str(path), prompt_field="question", answer_format="gsm8k", **keys)


def tasks_of(cfg: TaskConfig) -> list:
    train, held_out = hf_dataset_source.read(cfg)
    return train if held_out is None else train + held_out


def test_a_gsm8k_style_parquet_file_loads_with_answers_and_worked_solutions(tmp_path: Path) -> None:
    cfg = gsm8k(write_parquet(tmp_path / "gsm8k.parquet", GSM8K_ROWS))
    hf_dataset_source.check(cfg)
    tasks = tasks_of(cfg)

    assert [t.id for t in tasks] == ["train/0", "train/1", "train/2", "train/3"]
    assert [t.prompt for t in tasks] == [r["question"] for r in GSM8K_ROWS]
    assert [t.answer for t in tasks] == ["7", "12", "942", "42"]
    # The worked solution is the warm-up target, its '#### 7' line written the way verifiers read answers.
    assert tasks[0].demonstration == "3+4 = <<3+4=7>>7\n<answer>7</answer>"
    assert tasks[3].demonstration == "<answer>42</answer>"
    assert {t.verifier for t in tasks} == {"numeric"}  # gsm8k's default
    assert tasks[2].metadata == {"level": "hard"}  # unmapped columns are metadata


def test_the_demonstration_scores_full_marks_with_the_tasks_own_verifier(tmp_path: Path) -> None:
    from reinforge.tasks.verifiers import VERIFIERS

    for task in tasks_of(gsm8k(write_parquet(tmp_path / "gsm8k.parquet", GSM8K_ROWS))):
        assert VERIFIERS[task.verifier](task, task.demonstration) == 1.0
        assert VERIFIERS[task.verifier](task, "<answer>-1</answer>") == 0.0


def test_field_mapping_ids_solutions_and_an_explicit_verifier(tmp_path: Path) -> None:
    rows = [
        {"uid": "a", "q": "Capital of France?", "gold": "Paris", "worked": "It is <answer>Paris</answer>", "family": "geo"},
        {"uid": "b", "q": "2+2=", "gold": 4, "worked": None, "family": "math"},
    ]
    cfg = TaskConfig(
        source="hf_dataset", path=str(write_parquet(tmp_path / "d.parquet", [rows[0]])), prompt_field="q", answer_field="gold",
        id_field="uid", solution_field="worked",
    )
    (task,) = tasks_of(cfg)
    assert (task.id, task.prompt, task.answer, task.verifier) == ("a", "Capital of France?", "Paris", "exact")
    assert task.demonstration == "It is <answer>Paris</answer>" and task.metadata == {"family": "geo"}

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(rows[1]) + "\n")
    (second,) = tasks_of(cfg.model_copy(update={"path": str(path), "verifier": "numeric"}))
    # a null solution falls back to the answer; a numeric answer is written as JSON writes it
    assert (second.answer, second.demonstration, second.sft_target, second.verifier) == ("4", None, "4", "numeric")


def _write_each_format(tmp_path: Path, rows: list[dict]) -> dict[str, Path]:
    paths = {"parquet": write_parquet(tmp_path / "d.parquet", rows)}
    with (tmp_path / "d.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    paths["csv"] = tmp_path / "d.csv"
    (tmp_path / "d.json").write_text(json.dumps(rows))
    paths["json"] = tmp_path / "d.json"
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths["jsonl"] = tmp_path / "d.jsonl"
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    paths["arrow"] = tmp_path / "d.arrow"
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved_dataset"))
    paths["save_to_disk"] = tmp_path / "saved_dataset"
    shards = tmp_path / "shards"
    shards.mkdir()
    write_parquet(shards / "part-0.parquet", rows[:2])
    write_parquet(shards / "part-1.parquet", rows[2:])
    paths["glob"] = shards / "part-*.parquet"
    return paths


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "jsonl", "arrow", "save_to_disk", "glob"])
def test_every_format_gives_the_same_tasks(tmp_path: Path, fmt: str) -> None:
    path = _write_each_format(tmp_path, GSM8K_ROWS)[fmt]
    tasks = tasks_of(gsm8k(path))
    assert [(t.id, t.prompt) for t in tasks] == [(f"train/{i}", r["question"]) for i, r in enumerate(GSM8K_ROWS)]
    assert [(t.answer, t.demonstration) for t in tasks] == [
        ("7", "3+4 = <<3+4=7>>7\n<answer>7</answer>"),
        ("12", "6*2 = <<6*2=12>>12\n<answer>12</answer>"),
        ("942", "1000-58 = 942\n<answer>942</answer>"),
        ("42", "<answer>42</answer>"),
    ]


def test_the_source_is_registered_and_loads_through_the_registry(tmp_path: Path) -> None:
    rows = [{"question": f"{i}+{i}=", "answer": f"#### {2 * i}"} for i in range(10)]
    cfg = gsm8k(write_parquet(tmp_path / "d.parquet", rows), eval_size=3)
    registry.check_task_config(cfg)
    splits = registry.load_tasks(cfg, seed=0)
    assert len(splits.train) == 7 and len(splits.eval) == 3
    assert not {t.id for t in splits.train} & {t.id for t in splits.eval}
    assert [t.id for t in registry.load_tasks(cfg, seed=0).eval] == [t.id for t in splits.eval]  # seeded


# --------------------------------------------------------------------------- splits


@pytest.fixture
def saved_dict(tmp_path: Path) -> Path:
    def rows(split: str, n: int) -> list[dict]:
        return [{"question": f"{split} question {i}", "answer": f"#### {i}"} for i in range(n)]

    path = tmp_path / "gsm8k_saved"
    DatasetDict(train=Dataset.from_list(rows("train", 6)), test=Dataset.from_list(rows("test", 3))).save_to_disk(str(path))
    return path


def test_split_selection_in_a_saved_dataset_dict(saved_dict: Path) -> None:
    train, held_out = hf_dataset_source.read(gsm8k(saved_dict))
    assert held_out is None and [t.prompt for t in train] == [f"train question {i}" for i in range(6)]

    train, held_out = hf_dataset_source.read(gsm8k(saved_dict, split="test"))
    assert [t.id for t in train] == ["test/0", "test/1", "test/2"]

    splits = hf_dataset_source.load(gsm8k(saved_dict, eval_split="test", eval_size=1), seed=0)
    assert len(splits.train) == 6  # eval_size does not apply: the whole test split is held out
    assert [t.prompt for t in splits.eval] == [f"test question {i}" for i in range(3)]


def test_splits_inferred_from_file_names_in_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "gsm8k" / "main"
    folder.mkdir(parents=True)
    write_parquet(folder / "train-00000-of-00001.parquet", GSM8K_ROWS[:3])
    write_parquet(folder / "test-00000-of-00001.parquet", GSM8K_ROWS[3:])
    splits = hf_dataset_source.load(gsm8k(folder, eval_split="test"), seed=0)
    assert [t.answer for t in splits.train] == ["7", "12", "942"] and [t.answer for t in splits.eval] == ["42"]


def test_an_eval_file_is_held_out_whole_with_its_own_ids(tmp_path: Path, saved_dict: Path) -> None:
    held = write_parquet(tmp_path / "held.parquet", GSM8K_ROWS[:2] + [{"question": "train question 0", "answer": "#### 0", "level": ""}])
    splits = hf_dataset_source.load(gsm8k(saved_dict, eval_path=str(held)), seed=0)
    assert [t.id for t in splits.eval] == ["eval/train/0", "eval/train/1", "eval/train/2"]
    # the training copy of a held-out prompt is dropped
    assert [t.prompt for t in splits.train] == [f"train question {i}" for i in range(1, 6)]
    # an eval_path with several splits needs task.eval_split
    with pytest.raises(ConfigError, match=r"task\.eval_split: .* has the splits train, test; set task\.eval_split"):
        hf_dataset_source.check(gsm8k(held, eval_path=str(saved_dict)))
    chosen = hf_dataset_source.load(gsm8k(held, eval_path=str(saved_dict), eval_split="test"), seed=0)
    assert [t.id for t in chosen.eval] == ["eval/test/0", "eval/test/1", "eval/test/2"]


# --------------------------------------------------------------------------- bad input


def check_fails(cfg: TaskConfig, *fragments: str) -> str:
    with pytest.raises(ConfigError) as err:
        hf_dataset_source.check(cfg)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_paths_and_hub_names(tmp_path: Path) -> None:
    check_fails(gsm8k(tmp_path / "nope.parquet"), "task.path: no file or directory at", "nope.parquet")
    check_fails(TaskConfig(source="hf_dataset", path="openai/gsm8k"), "task.path", "'openai/gsm8k' is not a local file", "save_to_disk")
    check_fails(gsm8k(tmp_path / "*.parquet"), "task.path: the pattern", "matches no file")
    check_fails(TaskConfig(source="hf_dataset"), "task.path: source=hf_dataset needs")
    train = write_parquet(tmp_path / "d.parquet", GSM8K_ROWS)
    check_fails(gsm8k(train, eval_path=str(tmp_path / "held.parquet")), "task.eval_path: no file or directory at")


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    check_fails(gsm8k(tmp_path / "notes.txt"), "task.path", "notes.txt", "cannot read (.txt)", ".parquet")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    check_fails(gsm8k(empty_dir), "task.path", "not a save_to_disk directory")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    check_fails(gsm8k(tmp_path / "broken.parquet"), "task.path: the datasets library could not read", "broken.parquet")
    write_parquet(tmp_path / "a.parquet", GSM8K_ROWS)
    (tmp_path / "a.csv").write_text("question,answer\nq,#### 1\n")
    check_fails(gsm8k(tmp_path / "a.*"), "mixes formats")


def test_a_hub_repository_copy_with_several_configs_is_read_one_config_folder_at_a_time(tmp_path: Path) -> None:
    clone = tmp_path / "gsm8k"
    for config in ("main", "socratic"):
        (clone / config).mkdir(parents=True)
        write_parquet(clone / config / "train-00000-of-00001.parquet", GSM8K_ROWS[:3])
    write_parquet(clone / "main" / "test-00000-of-00001.parquet", GSM8K_ROWS[3:])
    configs = "".join(
        f"- config_name: {c}\n  data_files:\n  - split: train\n    path: {c}/train-*\n" for c in ("main", "socratic")
    )
    (clone / "README.md").write_text(f"---\nconfigs:\n{configs}---\n")
    check_fails(gsm8k(clone), "task.path: the datasets library could not read", "'main', 'socratic'", "set task.path to its folder")
    splits = hf_dataset_source.load(gsm8k(clone / "main", eval_split="test"), seed=0)
    assert [t.answer for t in splits.train] == ["7", "12", "942"] and [t.answer for t in splits.eval] == ["42"]


def test_unknown_columns_list_the_columns_there_are(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "d.parquet", GSM8K_ROWS)
    where = f"task.path {path}, split 'train'"
    check_fails(
        TaskConfig(source="hf_dataset", path=str(path)), "task.prompt_field: no column 'prompt'", where, "its columns: question, answer, level"
    )
    check_fails(gsm8k(path, answer_field="solution"), "task.answer_field: no column 'solution'", "question, answer, level")
    check_fails(gsm8k(path, id_field="uid"), "task.id_field: no column 'uid'")
    check_fails(gsm8k(path, solution_field="steps"), "task.solution_field: no column 'steps'")
    check_fails(gsm8k(path, messages_field="messages"), "task.messages_field: no column 'messages'")


def test_unknown_splits_list_the_splits_there_are(saved_dict: Path) -> None:
    check_fails(gsm8k(saved_dict, split="validation"), "task.split: no split 'validation'", "its splits: train, test")
    check_fails(gsm8k(saved_dict, eval_split="dev"), "task.eval_split: no split 'dev'", "its splits: train, test")
    check_fails(gsm8k(saved_dict, eval_split="train"), "task.eval_split: 'train' is also the training split")


def test_empty_splits_and_null_cells_name_the_row(tmp_path: Path) -> None:
    no_rows = {"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}
    pq.write_table(pa.table(no_rows), tmp_path / "empty.parquet")
    (tmp_path / "empty.csv").write_text("question,answer\n")
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "empty.json").write_text("[]")
    Dataset.from_dict({"question": [], "answer": []}).save_to_disk(str(tmp_path / "empty_saved"))
    for name in ("empty.parquet", "empty.csv", "empty.jsonl", "empty.json", "empty_saved"):
        check_fails(gsm8k(tmp_path / name), f"task.path: {tmp_path / name} is empty: no rows")
    # an empty file or saved split next to full ones is named
    folder = tmp_path / "folder"
    folder.mkdir()
    write_parquet(folder / "train.parquet", GSM8K_ROWS)
    pq.write_table(pa.table(no_rows), folder / "test.parquet")
    check_fails(gsm8k(folder), f"task.path: {folder / 'test.parquet'} has no rows", "remove it")
    DatasetDict(train=Dataset.from_list(GSM8K_ROWS), test=Dataset.from_dict({"question": [], "answer": [], "level": []})).save_to_disk(
        str(tmp_path / "empty_test")
    )
    check_fails(gsm8k(tmp_path / "empty_test"), f"task.path: {tmp_path / 'empty_test'}: the saved split(s) 'test' are empty")

    rows = [dict(r) for r in GSM8K_ROWS]
    rows[2]["question"] = None
    path = write_parquet(tmp_path / "null_prompt.parquet", rows)
    check_fails(gsm8k(path), f"task.path {path}, split 'train', row 2: column 'question' is null")
    rows = [dict(r) for r in GSM8K_ROWS]
    rows[1]["answer"] = None
    path = write_parquet(tmp_path / "null_answer.parquet", rows)
    check_fails(gsm8k(path), "row 1: column 'answer' is null")
    csv_path = tmp_path / "gap.csv"
    csv_path.write_text("question,answer\nq1,#### 1\n,#### 2\n")  # an empty CSV cell reads as null
    check_fails(gsm8k(csv_path), "row 1: column 'question' is null")


def test_bad_values_name_the_row(tmp_path: Path) -> None:
    rows = [dict(r) for r in GSM8K_ROWS]
    rows[3]["answer"] = "forty-two"
    check_fails(gsm8k(write_parquet(tmp_path / "a.parquet", rows)), "row 3: column 'answer' has no '#### ' final answer")
    rows[3]["answer"] = "#### many"
    check_fails(gsm8k(write_parquet(tmp_path / "b.parquet", rows)), "row 3:", "not a number but verifier is 'numeric'")
    check_fails(gsm8k(write_parquet(tmp_path / "c.parquet", rows), verifier="fuzzy"), "task.verifier: unknown verifier 'fuzzy'")
    assert tasks_of(gsm8k(write_parquet(tmp_path / "d.parquet", rows), verifier="exact"))[3].answer == "many"
    dup = [{"id": 1, "prompt": "a", "answer": "x"}, {"id": 1, "prompt": "b", "answer": "y"}]
    check_fails(
        TaskConfig(source="hf_dataset", path=str(write_parquet(tmp_path / "e.parquet", dup)), id_field="id"),
        "row 1: duplicate id '1' (first in row 0)",
    )
    blank = [{"prompt": "  ", "answer": "x"}]
    check_fails(TaskConfig(source="hf_dataset", path=str(write_parquet(tmp_path / "f.parquet", blank))), "row 0: column 'prompt' is empty")


def test_the_jsonl_source_refuses_keys_it_would_ignore(tmp_path: Path) -> None:
    from reinforge.tasks import jsonl_source

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "a", "answer": "b"}) + "\n")
    with pytest.raises(ConfigError, match="task.prompt_field applies to source=hf_dataset only"):
        jsonl_source.check(TaskConfig(source="jsonl", path=str(path), prompt_field="question"))
