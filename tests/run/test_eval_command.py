"""`evaluate` (the one evaluation code) and `reinforge eval` end to end on a saved nano model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import yaml

from reinforge.cli import main
from reinforge.config import ConfigError, dump_config, load_config
from reinforge.engines.base import Generation
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.models.loading import save_model
from reinforge.tasks.arithmetic import make_task
from reinforge.tasks.task import Task
from reinforge.run.eval_command import default_k_values, format_metric
from reinforge.config.eval_config import eval_config, find_run_config
from reinforge.evals.evaluation import evaluate


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
    # k = 1 is never listed: pass@1 from k samples is mean@k, which has its own column
    assert default_k_values(1) == []
    assert default_k_values(2) == [2]
    assert default_k_values(5) == [2, 4, 5]
    assert default_k_values(16) == [2, 4, 8, 16]


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
    assert list(report["overall"]) == ["accuracy", "mean@2", "pass@2"]  # mean@2 is pass@1: one column
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
    assert "mean@2 (the fraction of the 2 samples that solve a task) is also the unbiased pass@1 estimate" in (out / "eval.md").read_text()


def test_eval_command_with_a_missing_model_dir_exits_2(tmp_path, capsys) -> None:
    code = main(["eval", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "not a local directory" in err and "expected a local Hugging Face model directory" in err
    assert not (tmp_path / "out").exists()


# --- which config: the run's own, when --model is inside a run directory ---

RUN_TASK = ["task.params.op='*'", "task.params.digits=1", "task.eval_size=6", "trainer.seed=5"]


@pytest.fixture()
def run_dir(tmp_path, nano_model, tokenizer) -> Path:
    """A run directory as `reinforge train` leaves it: config.yaml (a multiplication task) and RUN/final."""
    run = tmp_path / "run"
    save_model(nano_model, tokenizer, run / "final")
    (run / "config.yaml").write_text(dump_config(load_config("default", [*RUN_TASK, f"trainer.output_dir={run}"])))
    (run / "metrics.jsonl").write_text("")
    return run


def eval_prompts(out: Path) -> list[str]:
    return [json.loads(line)["prompt"] for line in (out / "eval_records.jsonl").read_text().splitlines()]


def test_eval_of_a_runs_model_uses_the_runs_own_config(run_dir, tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(run_dir / "final"), "--samples", "1", "--output", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["task"]["params"] == {"op": "*", "digits": 1} and report["seed"] == 5
    prompts = eval_prompts(out)
    assert len(prompts) == 6 and all("*" in p for p in prompts)  # the run's multiplication, not the default sums
    source = str(run_dir.resolve() / "config.yaml")
    assert source in report["config_source"] and source in (out / "eval.md").read_text()
    printed = "".join(capsys.readouterr().out.split())  # the console may wrap a long path
    assert "".join(f"config: {source}".split()) in printed


def test_recipe_and_overrides_win_over_the_runs_config(run_dir, tmp_path) -> None:
    # Overrides apply on top of the run's config ...
    out = tmp_path / "eval-override"
    assert main(["eval", "--model", str(run_dir / "final"), "--samples", "1", "--output", str(out), "task.eval_size=3"]) == 0
    assert json.loads((out / "eval.json").read_text())["task"]["eval_size"] == 3
    assert all("*" in p for p in eval_prompts(out))
    # ... and an explicit --recipe replaces it.
    out = tmp_path / "eval-recipe"
    code = main(["eval", "--model", str(run_dir / "final"), "--recipe", "default", "--samples", "1", "--output", str(out),
                 "task.eval_size=3"])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["config_source"] == "recipe default (--recipe)"
    assert report["task"]["params"] == {} and all("+" in p for p in eval_prompts(out))


def test_a_model_outside_any_run_uses_the_default_recipe_and_says_so(model_dir, tmp_path) -> None:
    chosen = eval_config(str(model_dir), None, [])
    assert chosen.config.task.params == {} and chosen.source.startswith("recipe default (no run config.yaml")


def test_run_config_is_found_from_checkpoints_and_other_configs_are_not_taken(tmp_path) -> None:
    run = tmp_path / "run"
    model = run / "checkpoints" / "step_000010" / "model"
    model.mkdir(parents=True)
    assert find_run_config(model) is None
    (run / "config.yaml").write_text(dump_config(load_config("default", [])))
    assert find_run_config(model) == (run / "config.yaml").resolve()
    assert find_run_config(run / "final") == (run / "config.yaml").resolve()
    # A config.yaml of some other tool, nearer the model, is not a run config: skipped.
    (model.parent / "config.yaml").write_text("learning_rate: 0.1\n")
    assert find_run_config(model) == (run / "config.yaml").resolve()
    # More than three levels up is not the model's run.
    deep = run / "a" / "b" / "c" / "model"
    deep.mkdir(parents=True)
    assert find_run_config(deep) is None


def test_a_run_config_that_does_not_load_is_named(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    tree = yaml.safe_load(dump_config(load_config("default", [])))
    tree["task"]["eval_size"] = -1
    (run / "config.yaml").write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match=r"(?s)config\.yaml, the config of the run .*eval_size.* --recipe NAME"):
        eval_config(str(run / "final"), None, [])


# --- which prompt and extractor, and "no answer" apart from "wrong" ---


def test_eval_reports_its_prompt_and_extractor_and_counts_no_answer_apart(model_dir, tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    code = main([
        "eval", "--model", str(model_dir), "--samples", "0", "--output", str(out), "task.eval_size=6", "rollout.prompt_format=chat",
        "task.system_prompt='Be brief.'", "task.instruction='What is {question}?'", "task.answer_extractor=answer_tags",
    ])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    prompting = report["prompting"]
    assert (prompting["prompt_format"], prompting["system_prompt"], prompting["answer_extractor"]) == ("chat", "Be brief.", "answer_tags")
    assert prompting["instruction"] == "What is {question}?" and prompting["instruction_from"] == "task.instruction"
    assert prompting["first_prompt"].startswith("<bos><|system|>Be brief.<|end|><|user|>What is ")
    # the nano model never writes answer tags: no answer is found in any response, and none is "wrong"
    assert report["answers"] == {"correct": 0, "wrong": 0, "no_answer": 6}
    assert report["metrics"]["no_answer"] == 1.0 and report["samples"] == 0 and list(report["overall"]) == ["accuracy"]
    md = (out / "eval.md").read_text()
    assert "- greedy only, max" in md and "- answer extractor: answer_tags" in md and "0 correct, 0 wrong, 6 with no answer" in md
    printed = capsys.readouterr().out
    assert "system prompt: 'Be brief.'" in printed and "first prompt, as the model reads it" in printed


def test_answer_counts_split_unsolved_into_wrong_and_no_answer() -> None:
    from reinforge.evals.prompt_report import answer_counts

    records = [
        {"correct": True, "extracted": "7"},
        {"correct": False, "extracted": "8"},
        {"correct": False, "extracted": None},
        {"correct": True, "extracted": None},  # a user's verifier may accept a response the extractor found nothing in
    ]
    assert answer_counts(records) == {"correct": 2, "wrong": 1, "no_answer": 1}
    assert answer_counts([{"correct": True}]) is None  # game records carry no extraction
