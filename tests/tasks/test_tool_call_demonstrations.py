"""Multi-turn demonstrations in Hugging Face chat format (assistant `tool_calls`, role "tool"
results): read the same way by the JSONL and hf_dataset sources, and turned by the tool env into
exactly the tokens an episode with the real tool produces."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.envs.tool_env import ToolEnv
from reinforge.envs.tools.builtin import build_tools
from reinforge.tasks import hf_dataset_source, jsonl_source


def call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def conversation(a: int, b: int, arguments_as_text: bool = False) -> list[dict]:
    arguments = {"expression": f"{a}*{b}"}
    return [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": f"{a}*{b}="},
        {"role": "assistant", "content": "", "tool_calls": [call("calculator", json.dumps(arguments) if arguments_as_text else arguments)]},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": str(a * b)},
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def messages_cfg(path: Path, **keys) -> TaskConfig:
    return TaskConfig(source="hf_dataset", path=str(path), messages_field="messages", **keys)


def test_a_conversation_column_splits_into_prompt_demonstration_and_answer(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "demos.jsonl", [{"messages": conversation(12, 34)}, {"messages": conversation(7, 89, True)}])
    first, second = hf_dataset_source.read(messages_cfg(path))[0]

    assert first.prompt == conversation(12, 34)[:2]  # the leading system and user messages
    assert first.demonstration == conversation(12, 34)[2:]
    assert (first.answer, first.verifier, first.metadata) == ("408", "exact", {})  # the last assistant message
    assert second.demonstration[0]["tool_calls"][0]["function"]["arguments"] == '{"expression": "7*89"}'


def test_parquet_conversations_lose_the_nulls_of_arrows_union_struct(tmp_path: Path) -> None:
    """Arrow stores every message with the union of all rows' keys: a search call's arguments get
    `expression: null`, a user message gets `tool_calls: null`. The tasks must not carry them."""
    search = [
        {"role": "user", "content": "Who wrote Hamlet?"},
        {"role": "assistant", "content": "", "tool_calls": [call("search", {"query": "Hamlet author"})]},
        {"role": "tool", "content": "Hamlet is a tragedy by William Shakespeare."},
        {"role": "assistant", "content": "Shakespeare"},
    ]
    path = tmp_path / "demos.parquet"
    rows = [{"messages": conversation(12, 34)[1:], "answer": "408"}, {"messages": search, "answer": "Shakespeare"}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    stored = pq.read_table(path).to_pylist()
    assert stored[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"expression": None, "query": "Hamlet author"}
    assert stored[1]["messages"][0]["tool_calls"] is None
    multiply, lookup = hf_dataset_source.read(messages_cfg(path))[0]

    assert multiply.prompt == [{"role": "user", "content": "12*34="}]
    assert multiply.demonstration == conversation(12, 34)[2:] and multiply.answer == "408"
    assert lookup.demonstration == search[1:] and lookup.answer == "Shakespeare"


def test_both_sources_read_a_conversation_the_same_way(tmp_path: Path) -> None:
    """JSONL's `solution` takes the demonstration messages; hf_dataset takes the whole conversation
    (or a solution column): the tasks are equal."""
    messages = conversation(12, 34)
    jsonl = write_jsonl(tmp_path / "tasks.jsonl", [{"id": "m", "prompt": messages[:2], "answer": "408", "solution": messages[2:]}])
    (from_jsonl,) = jsonl_source.read_tasks(jsonl)
    conversations = write_jsonl(tmp_path / "m.jsonl", [{"id": "m", "messages": messages}])
    (from_messages,) = hf_dataset_source.read(messages_cfg(conversations, id_field="id"))[0]
    (from_solution,) = hf_dataset_source.read(
        TaskConfig(source="hf_dataset", path=str(jsonl), id_field="id", solution_field="solution")
    )[0]
    for task in (from_messages, from_solution):
        fields = (task.id, task.prompt, task.answer, task.verifier, task.demonstration, task.metadata)
        assert fields == (from_jsonl.id, from_jsonl.prompt, from_jsonl.answer, from_jsonl.verifier, from_jsonl.demonstration, {})


def test_a_single_plain_reply_is_a_text_demonstration(tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "<answer>Paris</answer>"}],
             "answer": "Paris"}]
    (task,) = hf_dataset_source.read(messages_cfg(write_jsonl(tmp_path / "d.jsonl", rows)))[0]
    assert task.demonstration == "<answer>Paris</answer>" and task.answer == "Paris"  # so a single-turn env can take it


def test_gsm8k_answers_in_the_last_assistant_message(tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "3+4?"}, {"role": "assistant", "content": "3+4=7\n#### 7"}]}]
    (task,) = hf_dataset_source.read(messages_cfg(write_jsonl(tmp_path / "d.jsonl", rows), answer_format="gsm8k"))[0]
    assert (task.answer, task.demonstration, task.verifier) == ("7", "3+4=7\n<answer>7</answer>", "numeric")


BAD_CONVERSATIONS = [
    ([{"role": "assistant", "content": "hi"}], "must start with the prompt"),
    ([{"role": "user", "content": "hi"}], "has no assistant message after the prompt"),
    (conversation(1, 2)[:4], "must end with an assistant message"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call("calculator", "{oops")]},
      {"role": "tool", "content": "1"}, {"role": "assistant", "content": "1"}], "arguments string is not JSON"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]},
      {"role": "assistant", "content": "1"}], "tool call 0 must be"),
    ([{"role": "user", "content": "q"}, {"role": "robot", "content": "1"}, {"role": "assistant", "content": "1"}],
     "must be a message with role assistant | tool | user"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}, {"role": "tool", "content": 5},
      {"role": "assistant", "content": "1"}], "(tool) needs a string 'content'"),
]


@pytest.mark.parametrize("messages, fragment", BAD_CONVERSATIONS)
def test_malformed_conversations_name_the_row(tmp_path: Path, messages: list, fragment: str) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"messages": conversation(1, 1), "answer": "1"}, {"messages": messages, "answer": "1"}])
    with pytest.raises(ConfigError) as err:
        hf_dataset_source.check(messages_cfg(path))
    assert f"task.path {path}, split 'train', row 1: column 'messages'" in str(err.value) and fragment in str(err.value)


def test_errors_number_messages_by_their_place_in_the_conversation(tmp_path: Path) -> None:
    messages = conversation(1, 1)
    messages[3]["content"] = None  # the tool result, message 3 of the conversation
    path = write_jsonl(tmp_path / "d.jsonl", [{"messages": messages}])
    with pytest.raises(ConfigError, match=r"row 0: column 'messages' message 3 \(tool\) needs a string 'content', got None"):
        hf_dataset_source.check(messages_cfg(path))


@pytest.mark.parametrize("messages, fragment", BAD_CONVERSATIONS[2:])
def test_malformed_jsonl_solutions_name_the_line(tmp_path: Path, messages: list, fragment: str) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "q", "answer": "1", "solution": messages[1:]}])
    with pytest.raises(ConfigError) as err:
        jsonl_source.read_tasks(path)
    assert f"{path}:1: 'solution'" in str(err.value) and fragment in str(err.value)


def test_an_empty_final_message_without_an_answer_column_is_refused(tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]}]
    with pytest.raises(ConfigError, match="row 0: the last assistant message .* is empty, so there is no answer; name an answer column"):
        hf_dataset_source.check(messages_cfg(write_jsonl(tmp_path / "d.jsonl", rows)))


@pytest.mark.parametrize("tool_format", ["compact", "hermes"])
def test_the_tool_env_warm_up_holds_exactly_the_tokens_of_a_real_episode(tmp_path: Path, tokenizer, tool_format: str) -> None:
    """The demonstration's tokens = the episode's prompt, the call as the policy writes it, the
    observation the env appends after running the real calculator, and the answer; only the
    policy's turns (each closed by the end-of-turn token) are trained."""
    path = write_jsonl(tmp_path / "demos.jsonl", [{"messages": conversation(12, 34)}])
    (task,) = hf_dataset_source.read(messages_cfg(path))[0]
    env = ToolEnv(tokenizer, build_tools(["calculator"]), tool_format)

    ids, trained = env.sft_example(task)

    written = {"compact": "<<calculator: 12*34>>",
               "hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}\n</tool_call>'}[tool_format]
    episode = env.episode()
    prompt = episode.reset(task)
    step = episode.step(written, "stop")
    assert step.info["valid_calls"] == 1 and step.observation_text == "408"  # the demonstrated result is the tool's
    call_turn = env.tokenizer(written, add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    answer_turn = env.tokenizer("408", add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    assert episode.step("408", "stop").done
    assert ids == prompt + call_turn + step.observation_ids + answer_turn
    assert trained == [False] * len(prompt) + [True] * len(call_turn) + [False] * len(step.observation_ids) + [True] * len(answer_turn)
