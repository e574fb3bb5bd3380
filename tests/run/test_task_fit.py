"""Tasks measured against the token budgets before any model: chat prompts under a raw format,
prompts past the context (a 10 MB one found from its length), taught turns past max_new_tokens."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.models.loading import save_model
from reinforge.models.tokenizer import MAX_TOKEN_CHARS
from reinforge.tasks.registry import load_tasks
from reinforge.run import task_fit
from reinforge.run.preflight import preflight
from reinforge.run.task_fit import check_tasks_fit

SMALL = ["task.train_size=200", "task.eval_size=20"]


@pytest.fixture(autouse=True)
def no_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every check here must answer without building or loading a model."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was built or loaded")

    monkeypatch.setattr("reinforge.models.tiny_llama.build_tiny_llama", forbidden)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", forbidden)
    monkeypatch.chdir(tmp_path)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sums(n: int) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(n)]


def refused(cfg) -> str:
    """The message of check_tasks_fit's refusal (after preflight, which must let the config pass)."""
    preflight(cfg)
    with pytest.raises(ConfigError) as err:
        check_tasks_fit(cfg, load_tasks(cfg.task, cfg.trainer.seed))
    return str(err.value)


# --------------------------------------------------------------------------- chat prompts


def test_chat_prompts_under_a_raw_format_fail_config_validate_at_their_line(tmp_path: Path, capsys) -> None:
    rows = sums(6)
    rows[3] = {"prompt": [{"role": "user", "content": "3+1="}], "answer": "4"}
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    # the default recipe sets rollout.prompt_format=raw
    assert main(["config", "validate", "default", "task.source=jsonl", f"task.path={path}"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4: the prompt is a list of chat messages, but rollout.prompt_format=raw" in err
    assert "set rollout.prompt_format=chat" in err
    # the tiny tokenizer has a chat template: auto and chat can hold the messages
    assert main(["config", "validate", "default", "task.source=jsonl", f"task.path={path}", "rollout.prompt_format=auto", *SMALL]) == 0


def test_auto_format_with_a_tokenizer_without_template_is_raw(tmp_path: Path, tokenizer, nano_model) -> None:
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    model_dir = save_model(nano_model, plain, tmp_path / "plain")
    path = write_jsonl(tmp_path / "chat.jsonl", [{"prompt": [{"role": "user", "content": "1+1="}], "answer": "2"}, *sums(3)])
    cfg = load_config("default", ["task.source=jsonl", f"task.path={path}", f"model.path={model_dir}", "rollout.prompt_format=auto", "sft.steps=0"])
    with pytest.raises(ConfigError, match=r"chat\.jsonl:1: .*auto picks raw: the model's tokenizer has no chat template"):
        preflight(cfg)


# --------------------------------------------------------------------------- prompt sizes


def test_a_10_mb_prompt_is_refused_from_its_length_before_any_tokenizer(tmp_path: Path, monkeypatch) -> None:
    def no_tokenizer(*args, **kwargs):
        raise AssertionError("a tokenizer was trained on the 10 MB prompt")

    monkeypatch.setattr(task_fit, "train_tokenizer", no_tokenizer)
    huge = "a" * 10_000_000  # one 10 MB word: the case that stalls BPE training
    path = write_jsonl(tmp_path / "big.jsonl", [*sums(4), {"prompt": huge, "answer": "1"}])
    cfg = load_config("default", ["task.source=jsonl", f"task.path={path}"])
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    at_least = -(-10_000_000 // MAX_TOKEN_CHARS)  # 625,000: a trained token spells at most 16 characters
    assert f"{path}:5: the prompt has 10,000,000 characters, at least {at_least:,} tokens" in str(err.value)
    assert "context is 128 tokens, 8 of them kept for the response" in str(err.value)


def test_a_model_directory_bounds_prompts_by_its_longest_vocabulary_entry(tmp_path: Path, tokenizer, nano_model) -> None:
    model_dir = save_model(nano_model, tokenizer, tmp_path / "m")
    longest = max(len(t) for t in tokenizer.get_vocab())
    context = nano_model.config.max_position_embeddings
    room = context - 8
    # room * longest characters can still be room tokens; one more character cannot
    fits = write_jsonl(tmp_path / "fits.jsonl", [*sums(4), {"prompt": "a" * (room * longest), "answer": "1"}])
    over = write_jsonl(tmp_path / "over.jsonl", [*sums(4), {"prompt": "a" * (room * longest + 1), "answer": "1"}])
    base = ["task.source=jsonl", f"model.path={model_dir}", "sft.steps=0"]
    cfg = load_config("default", [*base, f"task.path={fits}"])
    preflight(cfg)
    # the exact pass still finds it too long: 'a' is far from 16 characters a token
    with pytest.raises(ConfigError, match=r"longest prompt \(\d+ tokens\) plus rollout.max_new_tokens=8 exceeds"):
        check_tasks_fit(cfg, load_tasks(cfg.task, 0))
    with pytest.raises(ConfigError, match=rf"over\.jsonl:5: the prompt has {room * longest + 1:,} characters, at least {room + 1} tokens"):
        preflight(load_config("default", [*base, f"task.path={over}"]))


# --------------------------------------------------------------------------- taught turns


def test_jsonl_answers_longer_than_max_new_tokens_are_refused_with_the_numbers(tmp_path: Path) -> None:
    # Digits are one token each: "123456789012" is 12 tokens, 13 with the end token.
    rows = [*sums(30), {"id": "long", "prompt": "a long one", "answer": "123456789012"}]
    path = write_jsonl(tmp_path / "tasks.jsonl", rows)
    cfg = load_config("default", ["task.source=jsonl", f"task.path={path}", "task.eval_size=2"])  # max_new_tokens=8
    message = refused(cfg)
    assert "1 of 31 tasks teach an assistant turn longer than rollout.max_new_tokens=8 tokens" in message
    assert "longest 13 tokens: task long: 13 tokens" in message
    assert "set rollout.max_new_tokens >= 13" in message
    fixed = load_config("default", ["task.source=jsonl", f"task.path={path}", "task.eval_size=2", "rollout.max_new_tokens=13"])
    check_tasks_fit(fixed, load_tasks(fixed.task, 0))
    # evaluation's own cap is held to the same rule
    assert "eval.max_new_tokens=12" in refused(load_config(
        "default", ["task.source=jsonl", f"task.path={path}", "task.eval_size=2", "rollout.max_new_tokens=13", "eval.max_new_tokens=12"]
    ))


def test_without_warm_up_only_answers_the_exact_verifier_needs_whole_are_measured(tmp_path: Path) -> None:
    long_exact = write_jsonl(tmp_path / "exact.jsonl", [*sums(10), {"id": "e", "prompt": "x", "answer": "123456789012"}])
    long_numeric = write_jsonl(tmp_path / "numeric.jsonl", [*sums(10), {"prompt": "x", "answer": "123456789012", "verifier": "numeric"}])
    long_demo = write_jsonl(tmp_path / "demo.jsonl", [*sums(10), {"prompt": "x", "answer": "1", "solution": "1" * 40}])
    for path, refuses in ((long_exact, True), (long_numeric, False), (long_demo, False)):
        cfg = load_config("default", ["task.source=jsonl", f"task.path={path}", "task.eval_size=2", "sft.steps=0"])
        if refuses:
            assert "longest 13 tokens: task e" in refused(cfg)
        else:
            check_tasks_fit(cfg, load_tasks(cfg.task, 0))
    # with a warm-up, the 40-token solution is taught, so it must fit
    cfg = load_config("default", ["task.source=jsonl", f"task.path={long_demo}", "task.eval_size=2"])
    assert "longest 41 tokens" in refused(cfg)


def test_a_hopelessly_long_demonstration_is_refused_from_its_length(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(task_fit, "train_tokenizer", lambda *a, **k: pytest.fail("tokenizer trained"))
    path = write_jsonl(tmp_path / "t.jsonl", [*sums(5), {"prompt": "x", "answer": "1", "solution": "z" * 10_000}])
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", ["task.source=jsonl", f"task.path={path}"]))
    message = str(err.value)
    at_least = 10_000 // MAX_TOKEN_CHARS + 1  # 625 characters' worth of tokens, and the end token
    assert f"1 of 6 tasks teach an assistant turn longer than rollout.max_new_tokens=8" in message
    assert f"at least, from their length: no token covers more than {MAX_TOKEN_CHARS} characters; longest {at_least} tokens: {path}:6" in message


def test_hermes_calls_of_the_tool_agent_recipe_are_refused() -> None:
    # The measured case: every hermes call (~40+ tokens) was cut at 24 tokens, valid-call rate 0%.
    message = refused(load_config("tool-agent", ["env.tool_format=hermes", *SMALL]))
    assert "tasks teach an assistant turn longer than rollout.max_new_tokens=24 tokens" in message
    longest = int(message.split("longest ")[1].split(" tokens")[0])
    assert longest > 24 and f"set rollout.max_new_tokens >= {longest}" in message
    fixed = load_config("tool-agent", ["env.tool_format=hermes", f"rollout.max_new_tokens={longest}", "model.max_positions=256", *SMALL])
    check_tasks_fit(fixed, load_tasks(fixed.task, 0))
    compact = load_config("tool-agent", SMALL)  # the recipe as shipped fits
    check_tasks_fit(compact, load_tasks(compact.task, 0))


# --------------------------------------------------------------------------- an env of the user's own

PROTOCOL_ONLY_ENV = '''
from reinforge.envs.chat_format import ChatFormat


class EchoEnv:
    """The Env protocol and nothing more: no demonstration_turns."""

    max_turns = 2

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.chat = ChatFormat(tokenizer)
        self.stop_token_ids = (self.chat.end_of_turn_id,)

    def prompt_ids(self, task):
        return self.chat.prompt_ids([{"role": "user", "content": task.prompt}])

    def sft_example(self, task):
        ids = self.prompt_ids(task)
        trained = [False] * len(ids)
        for message in task.demonstration:
            turn = (self.chat.assistant_ids(message["content"]) if message["role"] == "assistant"
                    else self.chat.observation_ids([message]))
            ids += turn
            trained += [message["role"] == "assistant"] * len(turn)
        return ids, trained

    def decode_response(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def episode(self):
        raise AssertionError("no episode runs before any model")


def load(cfg, seed):
    from reinforge.tasks.task import Task

    words = cfg.params["words"]
    return [
        Task(id=f"t{i}", prompt=f"say {w}", answer=w,
             demonstration=[{"role": "assistant", "content": "hm"}, {"role": "user", "content": "go on"},
                            {"role": "assistant", "content": w}])
        for i, w in enumerate(words)
    ]
'''


def test_an_env_without_demonstration_turns_is_measured_on_its_sft_example(tmp_path: Path) -> None:
    (tmp_path / "echo.py").write_text(PROTOCOL_ONLY_ENV)
    words = ["a", "b", "c", "d", "e " * 20]  # the last one's second turn is ~40 tokens, the others 2
    base = ["task.source=./echo.py:load", f"task.params={{words: {words}}}", "task.eval_size=2",
            "env.type=./echo.py:EchoEnv", "rollout.prompt_format=chat", "sft.steps=10"]
    message = refused(load_config("default", [*base, "rollout.max_new_tokens=8"]))
    assert "1 of 5 tasks teach an assistant turn longer than rollout.max_new_tokens=8" in message
    assert "task t4:" in message

    cfg = load_config("default", [*base, "rollout.max_new_tokens=48"])
    preflight(cfg)
    check_tasks_fit(cfg, load_tasks(cfg.task, cfg.trainer.seed))


def test_trained_runs_are_the_taught_turns() -> None:
    assert task_fit.trained_runs([False, True, True, False, False, True, False, True]) == [2, 1, 1]
    assert task_fit.trained_runs([]) == [] and task_fit.trained_runs([False]) == []
