"""`evaluate` (the one evaluation code) and `reinforge eval` end to end on a saved nano model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.cli import main
from reinforge.engines.base import Generation
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.models.loading import save_model
from reinforge.tasks.arithmetic import make_task
from reinforge.tasks.task import Task
from reinforge.trainer.eval_command import default_k_values, format_metric
from reinforge.trainer.evaluation import evaluate


class CharEnv(SingleTurnEnv):
    """Prompt ids are the task's index; responses are text encoded one code point per token."""

    max_turns = 1
    stop_token_ids = ()

    def __init__(self, tasks: list[Task]):
        self.index = {t.id: i for i, t in enumerate(tasks)}

    def prompt_ids(self, task: Task) -> list[int]:
        return [self.index[task.id]]

    def decode_response(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids)


class ScriptedEngine:
    """Greedy answers and sampled answers per prompt index, in order; counts generate calls."""

    policy_version = 0

    def __init__(self, greedy: list[str], samples: list[list[str]]):
        self.greedy, self.samples, self.calls = greedy, samples, 0

    def generate(self, prompts, params, seed=None):
        self.calls += 1
        drawn: dict[int, int] = {}
        out = []
        for (i,) in prompts:
            if params.temperature == 0:
                text = self.greedy[i]
            else:
                text = self.samples[i][drawn.get(i, 0)]
                drawn[i] = drawn.get(i, 0) + 1
            out.append(Generation([ord(ch) for ch in text], [0.0] * len(text), "stop"))
        return out

    def sync_weights(self, version: int) -> None:
        pass


def test_a_failed_verification_counts_as_unsolved_and_is_counted_and_named() -> None:
    from reinforge.rewards.call_errors import RewardTimeout

    tasks = [make_task(15, 17, True), make_task(19, 3, True)]
    engine = ScriptedEngine(greedy=["32", "22"], samples=[["32", "1"], ["22", "22"]])
    seen: list[tuple[str, str]] = []

    def verify(batch_tasks, responses):  # the scorer's verify_responses: here the task "19+3" hangs
        seen.extend((t.id, r) for t, r in zip(batch_tasks, responses))
        return [RewardTimeout("reward verifier: timed out after 1 s") if t.id == tasks[1].id else float(r == t.answer)
                for t, r in zip(batch_tasks, responses)]

    metrics, records = evaluate(engine, CharEnv(tasks), tasks, 8, samples=2, temperature=1.0, verify=verify)
    assert len(seen) == 2 + 4  # every greedy answer and sample, in one batch
    assert metrics["verify_errors"] == 3.0 and metrics["accuracy"] == 0.5
    assert records[1]["correct"] is False and records[1]["sample_correct"] == [False, False]
    assert records[1]["verify_errors"] == ["reward verifier: timed out after 1 s"] * 3
    assert "verify_errors" not in records[0] and records[0]["sample_correct"] == [True, False]


def test_evaluate_reports_pass_at_k_per_family_accuracy_and_sample_correctness() -> None:
    tasks = [make_task(15, 17, True), make_task(19, 3, True), make_task(12, 3, True), Task("x", "?", "yes")]
    assert [t.metadata.get("family") for t in tasks] == ["carry", "carry", "no_carry", None]
    engine = ScriptedEngine(
        greedy=["32", "21", "15", "no"],
        samples=[["32", "22", "1"], ["21", "21", "20"], ["15", "15", "15"], ["yes", "no", "no"]],
    )
    metrics, records = evaluate(engine, CharEnv(tasks), tasks, 8, samples=3, temperature=1.0)

    assert engine.calls == 2  # one greedy batch, one sampled batch
    assert metrics["accuracy"] == pytest.approx(2 / 4)
    assert metrics["mean@3"] == pytest.approx((1 + 0 + 3 + 1) / 12)
    assert metrics["pass@3"] == pytest.approx(3 / 4)
    assert metrics["accuracy/carry"] == pytest.approx(1 / 2)
    assert metrics["accuracy/no_carry"] == 1.0 and metrics["accuracy/all"] == 0.0
    assert metrics["eval_tasks"] == 4.0
    assert [r["family"] for r in records] == ["carry", "carry", "no_carry", "all"]
    assert records[0]["sample_correct"] == [True, False, False] and records[0]["samples"] == ["32", "22", "1"]
    assert records[3]["correct"] is False and records[3]["greedy"] == "no"


def test_default_k_values() -> None:
    assert default_k_values(1) == [1]
    assert default_k_values(2) == [1, 2]
    assert default_k_values(5) == [1, 2, 4, 5]
    assert default_k_values(16) == [1, 2, 4, 8, 16]


@pytest.fixture()
def model_dir(tmp_path, nano_model, tokenizer) -> Path:
    return save_model(nano_model, tokenizer, tmp_path / "model")


def md_rows(text: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[2:]}  # skip header and rule


def test_eval_command_writes_consistent_json_and_markdown(model_dir, tmp_path) -> None:
    out = tmp_path / "eval"
    code = main(["eval", "--model", str(model_dir), "--samples", "2", "--output", str(out), "task.eval_size=16", "trainer.seed=3"])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["tasks"] == 16 and report["samples"] == 2 and report["seed"] == 3
    assert list(report["overall"]) == ["accuracy", "mean@2", "pass@1", "pass@2"]
    for metric in report["overall"].values():
        assert 0.0 <= metric["ci_low"] <= metric["value"] <= metric["ci_high"] <= 1.0
    # The training loop's flat metrics and the report come from the same records.
    assert report["metrics"]["accuracy"] == pytest.approx(report["overall"]["accuracy"]["value"])
    assert report["metrics"]["pass@2"] == pytest.approx(report["overall"]["pass@2"]["value"])

    families = report["families"]
    assert set(families) <= {"carry", "no_carry"} and sum(f["tasks"] for f in families.values()) == 16
    for name, entry in families.items():
        assert report["metrics"][f"accuracy/{name}"] == pytest.approx(entry["metrics"]["accuracy"]["value"])

    rows = md_rows((out / "eval.md").read_text())
    assert set(rows) == {"overall", *families}
    assert rows["overall"] == ["16", *(format_metric(m) for m in report["overall"].values())]
    for name, entry in families.items():
        assert rows[name] == [str(entry["tasks"]), *(format_metric(m) for m in entry["metrics"].values())]
    assert len((out / "eval_records.jsonl").read_text().splitlines()) == 16


def test_eval_command_with_a_missing_model_dir_exits_2(tmp_path, capsys) -> None:
    code = main(["eval", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "not a local directory" in err and "no hub downloads" in err
    assert not (tmp_path / "out").exists()
