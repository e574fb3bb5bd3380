"""JSONL task files: good files load, every malformed line is reported with its line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks import jsonl_source


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def numbered(n: int) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": i + 1, "verifier": "numeric"} for i in range(n)]


def test_good_file_parses_every_field(tmp_path: Path) -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"prompt": "2+2=", "answer": 4},
            "",  # blank lines are skipped
            {"id": "q7", "prompt": chat, "answer": "Paris", "solution": "<answer>Paris</answer>", "topic": "geo"},
            {"id": 8, "prompt": "true?", "answer": True, "verifier": "exact"},
            {"prompt": "half", "answer": 0.5, "verifier": "numeric"},
        ],
    )
    first, second, third, fourth = jsonl_source.read_tasks(path)

    assert (first.id, first.prompt, first.answer, first.verifier) == ("train:1", "2+2=", "4", "exact")
    assert first.demonstration is None and first.metadata == {}
    assert second.id == "q7" and second.prompt == chat and second.demonstration == "<answer>Paris</answer>"
    assert second.metadata == {"topic": "geo"}
    assert (third.id, third.answer) == ("8", "true")
    assert (fourth.answer, fourth.verifier) == ("0.5", "numeric")


@pytest.mark.parametrize(
    "bad_line, fragment",
    [
        ("{not json", "invalid JSON"),
        ('["a", "list"]', "expected a JSON object"),
        ({"answer": "4"}, "missing required field 'prompt'"),
        ({"prompt": "2+2="}, "missing required field 'answer'"),
        ({"prompt": 5, "answer": "4"}, "'prompt' must be"),
        ({"prompt": "   ", "answer": "4"}, "'prompt' is empty"),
        ({"prompt": [], "answer": "4"}, "'prompt' must be"),
        ({"prompt": [{"role": "user"}], "answer": "4"}, "message 0"),
        ({"prompt": [{"role": "user", "content": 3}], "answer": "4"}, "message 0"),
        ({"prompt": "2+2=", "answer": None}, "'answer' is null"),
        ({"prompt": "2+2=", "answer": [4]}, "'answer' must be"),
        ({"prompt": "2+2=", "answer": "4", "id": [1]}, "'id' must be"),
        ({"prompt": "2+2=", "answer": "4", "solution": 4}, "'solution' must be"),
        ({"prompt": "2+2=", "answer": "4", "verifier": "fuzzy"}, "unknown verifier 'fuzzy'"),
        ({"prompt": "2+2=", "answer": "four", "verifier": "numeric"}, "is not a number"),
        ({"id": "a", "prompt": "again", "answer": "4"}, "duplicate id 'a' (first on line 1)"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, bad_line, fragment: str) -> None:
    path = write_jsonl(tmp_path / "tasks.jsonl", [{"id": "a", "prompt": "1+1=", "answer": 2}, "", bad_line])
    with pytest.raises(ConfigError) as err:
        jsonl_source.read_tasks(path)
    assert f"{path}:3:" in str(err.value)
    assert fragment in str(err.value)


def test_invalid_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"prompt": "a", "answer": "b"}\n{"prompt": "\xff", "answer": "b"}\n')
    with pytest.raises(ConfigError, match=r"tasks\.jsonl:2: not valid UTF-8"):
        jsonl_source.read_tasks(path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(ConfigError, match="contains no tasks"):
        jsonl_source.check(TaskConfig(source="jsonl", path=str(empty)))
    with pytest.raises(ConfigError, match="does not exist"):
        jsonl_source.check(TaskConfig(source="jsonl", path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(ConfigError, match="task.path"):
        jsonl_source.check(TaskConfig(source="jsonl"))


def test_a_directory_is_named_as_one_not_as_missing(tmp_path: Path) -> None:
    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    train = write_jsonl(tmp_path / "train.jsonl", numbered(4))
    for cfg in (TaskConfig(source="jsonl", path=str(folder)), TaskConfig(source="jsonl", path=str(train), eval_path=str(folder))):
        with pytest.raises(ConfigError) as err:
            jsonl_source.check(cfg)
        assert str(folder) in str(err.value) and "is a directory" in str(err.value)
        assert "does not exist" not in str(err.value)


def test_check_reads_the_eval_file_too(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", numbered(4))
    broken = write_jsonl(tmp_path / "eval.jsonl", [{"prompt": "x", "answer": "y"}, "{oops"])
    with pytest.raises(ConfigError, match=r"eval\.jsonl:2:"):
        jsonl_source.check(TaskConfig(source="jsonl", path=str(train), eval_path=str(broken)))


def test_split_is_disjoint_seeded_and_capped_at_half(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", numbered(40))
    cfg = TaskConfig(source="jsonl", path=str(path), eval_size=10)

    splits = jsonl_source.load(cfg, seed=1)
    assert len(splits.eval) == 10 and len(splits.train) == 30
    assert not {t.id for t in splits.train} & {t.id for t in splits.eval}
    assert not {t.prompt for t in splits.train} & {t.prompt for t in splits.eval}
    assert [t.id for t in jsonl_source.load(cfg, seed=1).eval] == [t.id for t in splits.eval]
    assert [t.id for t in jsonl_source.load(cfg, seed=2).eval] != [t.id for t in splits.eval]

    capped = jsonl_source.load(cfg.model_copy(update={"eval_size": 500}), seed=1)
    assert len(capped.eval) == 20 and len(capped.train) == 20


def test_duplicate_prompts_never_straddle_the_split(tmp_path: Path) -> None:
    records = [{"prompt": "same", "answer": str(i)} for i in range(10)]
    path = write_jsonl(tmp_path / "train.jsonl", records + numbered(10))
    splits = jsonl_source.load(TaskConfig(source="jsonl", path=str(path), eval_size=8), seed=0)
    assert not {t.prompt for t in splits.train} & {t.prompt for t in splits.eval}


def test_eval_file_is_held_out_whole(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", numbered(6))
    held_out = write_jsonl(tmp_path / "eval.jsonl", [{"prompt": "0+1=", "answer": 1}, {"prompt": "new", "answer": 2}])
    splits = jsonl_source.load(TaskConfig(source="jsonl", path=str(train), eval_path=str(held_out), eval_size=1), seed=0)
    assert [t.prompt for t in splits.eval] == ["0+1=", "new"]
    # The training copy of a held-out prompt is dropped.
    assert [t.prompt for t in splits.train] == [f"{i}+1=" for i in range(1, 6)]


def test_ids_must_not_clash_across_files(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [{"id": "x", "prompt": "a", "answer": "1"}])
    held_out = write_jsonl(tmp_path / "eval.jsonl", [{"id": "x", "prompt": "b", "answer": "2"}])
    with pytest.raises(ConfigError, match="'x' is in both"):
        jsonl_source.load(TaskConfig(source="jsonl", path=str(train), eval_path=str(held_out)), seed=0)
