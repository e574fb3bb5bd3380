"""ToolEnv: tool calls run and come back as observations; errors are observations and are counted."""

from __future__ import annotations

import time

from reinforge.envs.chat_format import TRUNCATED
from reinforge.envs.tool_env import ToolEnv
from reinforge.envs.tools.builtin import build_tools
from reinforge.envs.tools.registry import ToolRegistry
from reinforge.tasks.task import Task

TASK = Task(id="m", prompt="123*45=", answer="5535", verifier="numeric")


def make_env(tokenizer, **kwargs) -> ToolEnv:
    return ToolEnv(tokenizer, build_tools(["calculator"]), "compact", **kwargs)


def test_valid_call_runs_the_tool_and_appends_its_result(tokenizer) -> None:
    env = make_env(tokenizer, valid_call_reward=0.1)
    episode = env.episode()
    assert episode.reset(TASK) == env.prompt_ids(TASK)
    result = episode.step("<<calculator: 123*45>>", "stop")
    assert not result.done
    assert result.observation_ids == env.chat.observation_ids([{"role": "tool", "content": "5535"}])
    assert result.info == {"tool_calls": 1, "valid_calls": 1, "tool_errors": 0}
    assert result.reward == 0.1 and result.observation_text == "5535"
    answer = episode.step("5535", "stop")
    assert answer.done and answer.observation_ids == [] and answer.info == {"finish_reason": "stop", "void_turns": 0}


def test_malformed_and_unknown_calls_are_error_observations(tokenizer) -> None:
    env = ToolEnv(tokenizer, build_tools(["calculator"]), "hermes")
    episode = env.episode()
    episode.reset(TASK)
    broken = episode.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1+</tool_call>', "stop")
    assert not broken.done and broken.info == {"tool_calls": 1, "valid_calls": 0, "tool_errors": 1}
    assert broken.observation_text.startswith("error: malformed tool call")
    unknown = episode.step('<tool_call>{"name": "weather", "arguments": {}}</tool_call>', "stop")
    assert unknown.info["tool_errors"] == 1 and "weather" in unknown.observation_text and "calculator" in unknown.observation_text
    refused = episode.step('<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>', "stop")
    assert refused.info == {"tool_calls": 1, "valid_calls": 0, "tool_errors": 1}
    assert refused.observation_text.startswith("error:")


def test_a_hanging_tool_times_out_into_an_error_observation(tokenizer) -> None:
    registry = ToolRegistry()

    @registry.register(timeout_s=0.3)
    def slow(x: str) -> str:
        """Sleeps far past its timeout.

        Args:
            x: ignored
        """
        time.sleep(30)
        return x

    env = ToolEnv(tokenizer, registry, "compact")
    episode = env.episode()
    episode.reset(TASK)
    start = time.monotonic()
    result = episode.step("<<slow: hi>>", "stop")
    assert time.monotonic() - start < 5
    assert result.info["tool_errors"] == 1 and "timed out" in result.observation_text


def test_void_turns_and_long_observations(tokenizer) -> None:
    env = make_env(tokenizer, max_observation_tokens=5)
    episode = env.episode()
    episode.reset(TASK)
    long = episode.step("<<calculator: 99999999*99999999>>", "stop")
    assert long.observation_text == tokenizer.decode(tokenizer("9999999800000001", add_special_tokens=False).input_ids[:5]) + TRUNCATED
    assert episode.step("", "stop").info["void_turns"] == 1  # neither a call nor an answer
    assert env.episode().step("12", "length").info["void_turns"] == 1  # cut off before answering
    assert env.episode().step("12", "stop").info["void_turns"] == 0


def test_sft_example_trains_only_the_assistant_turns(tokenizer) -> None:
    env = make_env(tokenizer)
    demo = [
        {"role": "assistant", "content": "<<calculator: 123*45>>"},
        {"role": "tool", "content": "5535"},
        {"role": "assistant", "content": "5535"},
    ]
    ids, trained = env.sft_example(Task(id="m", prompt="123*45=", answer="5535", demonstration=demo))
    prompt = env.prompt_ids(TASK)
    call = env.chat.assistant_ids("<<calculator: 123*45>>")
    obs = env.chat.observation_ids([{"role": "tool", "content": "5535"}])
    answer = env.chat.assistant_ids("5535")
    assert ids == prompt + call + obs + answer
    assert trained == [False] * len(prompt) + [True] * len(call) + [False] * len(obs) + [True] * len(answer)
    # a plain-text demonstration is one assistant turn
    ids, trained = env.sft_example(Task(id="d", prompt="1+1=", answer="2"))
    assert ids[-2:] == tokenizer("2", add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    assert trained[-2:] == [True, True] and not any(trained[:-2])


def test_demonstrations_in_hf_tool_call_format_render_in_the_env_syntax(tokenizer) -> None:
    from reinforge.tasks.arithmetic import calculator_trace

    task = Task(id="m", prompt="123*45=", answer="5535", demonstration=calculator_trace("123*45", "5535"))
    hermes = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "123*45"}}\n</tool_call>'
    for style, written in [("compact", "<<calculator: 123*45>>"), ("hermes", hermes)]:
        env = ToolEnv(tokenizer, build_tools(["calculator"]), style)
        ids, trained = env.sft_example(task)
        first_turn = [i for i, t in zip(ids, trained) if t][: len(env.chat.assistant_ids(written))]
        assert tokenizer.decode(first_turn, skip_special_tokens=True) == written
        # and what the demonstration writes is what the env's parser reads back as a valid call
        assert env.episode().step(written, "stop").info["valid_calls"] == 1
