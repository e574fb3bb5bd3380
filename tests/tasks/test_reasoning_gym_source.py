"""reasoning-gym source: tasks round-trip through our verifier, bad configs fail before compute."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.verifiers import verify
from reinforge.tasks import reasoning_gym_source
from reinforge.tasks.registry import load_tasks


def rg_config(dataset: str | None = "chain_sum", **kwargs) -> TaskConfig:
    return TaskConfig(source="reasoning_gym", dataset=dataset, train_size=kwargs.pop("train_size", 30),
                      eval_size=kwargs.pop("eval_size", 10), **kwargs)


@pytest.mark.parametrize("dataset", ["chain_sum", "basic_arithmetic", "leg_counting"])
def test_dataset_answer_round_trips_through_verifier(dataset: str) -> None:
    splits = load_tasks(rg_config(dataset), seed=0)  # with the source's default instruction (tasks.prompting)
    for task in splits.train[:5] + splits.eval[:5]:
        assert task.verifier == "reasoning_gym" and task.metadata["dataset"] == dataset
        question = task.metadata["entry"]["question"]
        assert task.prompt == f"{question}\n\n{reasoning_gym_source.DEFAULT_INSTRUCTION}" and "<answer>" in task.prompt
        assert verify(task, f"Let me think.\n<answer>{task.answer}</answer>") == 1.0
        assert verify(task, task.sft_target) == 1.0
        assert verify(task, "<answer>definitely not it</answer>") < 1.0


def test_eval_questions_are_not_training_questions_and_seeded() -> None:
    cfg = rg_config(params={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, train_size=60, eval_size=40)
    splits = reasoning_gym_source.load(cfg, seed=0)
    train_questions = {t.metadata["entry"]["question"] for t in splits.train}
    assert len(splits.train) == 60 and 0 < len(splits.eval) <= 40
    assert not train_questions & {t.metadata["entry"]["question"] for t in splits.eval}
    assert len({t.id for t in splits.train + splits.eval}) == len(splits.train) + len(splits.eval)

    again = reasoning_gym_source.load(cfg, seed=0)
    assert [t.prompt for t in again.train] == [t.prompt for t in splits.train]


def test_unknown_dataset_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        reasoning_gym_source.check(rg_config("chain_summ"))
    assert "'chain_summ'" in str(err.value) and "chain_sum" in str(err.value) and "leg_counting" in str(err.value)


def test_missing_dataset_name() -> None:
    with pytest.raises(ConfigError, match="task.dataset"):
        reasoning_gym_source.check(rg_config(None))


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"no_such_knob": 1}, "no_such_knob"),
        ({"min_terms": 0}, "min_terms must be positive"),
        ({"seed": 3}, "trainer.seed"),
    ],
)
def test_bad_params_carry_reasoning_gym_message(params: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        reasoning_gym_source.check(rg_config(params=params))


def test_good_config_checks() -> None:
    reasoning_gym_source.check(rg_config(params={"min_terms": 2, "max_terms": 3}))


def test_a_shrunken_held_out_set_is_reported_with_its_numbers(caplog: pytest.LogCaptureFixture) -> None:
    # 1-digit sums of two terms: a few hundred distinct questions, so many held-out ones repeat training ones.
    params = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    cfg = rg_config(params=params, train_size=100, eval_size=100)
    with caplog.at_level("WARNING", logger=reasoning_gym_source.__name__):
        splits = reasoning_gym_source.load(cfg, seed=0)
    kept = len(splits.eval)
    assert 0 < kept < 100
    [record] = [r for r in caplog.records if r.name == reasoning_gym_source.__name__]
    message = record.getMessage()
    assert f"task.eval_size=100, but only {kept} held-out tasks remain: {100 - kept} of the generated" in message
    assert "lower task.train_size (now 100) or widen task.params" in message

    caplog.clear()
    with caplog.at_level("WARNING", logger=reasoning_gym_source.__name__):
        wide = reasoning_gym_source.load(rg_config(params={"min_digits": 4, "max_digits": 4}, train_size=20, eval_size=10), seed=0)
    assert len(wide.eval) == 10 and not caplog.records  # nothing dropped, nothing said
