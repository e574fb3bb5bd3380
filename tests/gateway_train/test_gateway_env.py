"""The gateway env turns a session's pieces into trajectories: one per piece, the lead first; an
agent failure marks the episode (not a score); an episode without a model call still counts."""

from __future__ import annotations

from types import SimpleNamespace

from reinforge.gateway import TrajectoryPart
from reinforge.gateway.agent_outcome import AgentOutcome
from reinforge.gateway.env import GatewayEnv, result_text
from reinforge.rollout.episode_parts import AGENT_ERROR
from reinforge.tasks.task import Task

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "math",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]


def session(parts, calls=2, splits=1, errors=()):
    return SimpleNamespace(parts=lambda: parts, calls=calls, splits=splits, branches=0, errors=list(errors))


def part(ids, mask, messages, split=False):
    return TrajectoryPart(token_ids=ids, loss_mask=mask, logprobs=[-0.5 if m else 0.0 for m in mask], turn_spans=[(1, len(ids))],
                          prompt_length=1, finish_reason="stop", policy_version=3, messages=messages, starts_with_split=split,
                          branch=False, calls=1)


def test_a_split_episode_becomes_pieces_that_share_its_result(tokenizer):
    env = GatewayEnv(tokenizer, "unused:agent", agent_tools=TOOLS)
    task = Task(id="t", prompt="3*4=", answer="12")
    first = part([1, 5, 6], [False, True, True], [{"role": "user", "content": "3*4="}, {"role": "assistant", "content": "x"}])
    last = [{"role": "user", "content": "3*4= (again)"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"3*4\"}"}}]},
            {"role": "tool", "content": "12", "tool_call_id": "c"}, {"role": "assistant", "content": "12"}]
    second = part([1, 7, 8, 9], [False, True, False, True], last, split=True)
    out = env.episode_trajectories(task, 4, session([first, second], errors=["max_calls"]), AgentOutcome(ok=True, result={"n": 12}))
    assert [t.episode_part for t in out] == [0, 1] and all(t.group_id == 4 and t.task_id == "t" for t in out)
    assert [t.response_text for t in out] == ['{"n": 12}'] * 2 and out[1].agent_result == {"n": 12}
    assert out[1].token_ids == [1, 7, 8, 9] and out[1].behaviour_logprobs == [0.0, -0.5, 0.0, -0.5] and out[0].policy_version == 3
    lead = out[0]
    assert lead.stats["model_calls"] == 2 and lead.stats["splits"] == 1 and lead.stats["pieces"] == 2
    assert lead.stats["tool_calls"] == lead.stats["valid_calls"] == 1 and lead.stats["tool_errors"] == 0
    assert lead.stats["gateway_errors"] == 1 and out[1].stats == {}
    assert [t["role"] for t in lead.transcript] == ["user", "policy", "tool", "policy"]
    assert "[tool call] calculator" in lead.transcript[1]["text"] and lead.transcript[2]["message"]["tool_call_id"] == "c"
    assert lead.errors == ["gateway: max_calls"]


def test_a_failed_agent_marks_every_piece_and_is_counted(tokenizer):
    env = GatewayEnv(tokenizer, "unused:agent")
    p = part([1, 5, 6], [False, True, True], [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    out = env.episode_trajectories(Task(id="t", prompt="q", answer="a"), 0, session([p, p], splits=1),
                                   AgentOutcome.failed("timeout", "the agent did not return within 2 s"))
    assert [t.finish_reason for t in out] == [AGENT_ERROR, AGENT_ERROR] and out[0].response_text == ""
    assert out[0].stats["agent_timeouts"] == 1 and out[0].errors[-1].startswith("agent timeout: ")


def test_an_agent_that_never_calls_the_model_still_counts_in_its_group(tokenizer):
    env = GatewayEnv(tokenizer, "unused:agent")
    task = Task(id="t", prompt="q", answer="42")
    (only,) = env.episode_trajectories(task, 0, session([], calls=0, splits=0), AgentOutcome(ok=True, result="42"))
    assert only.response_text == "42" and not any(only.loss_mask) and only.token_ids == env.prompt_ids(task)
    assert only.stats["no_model_calls"] == 1


def test_warm_up_lays_a_demonstration_out_as_the_agents_first_request(tokenizer):
    env = GatewayEnv(tokenizer, "unused:agent", agent_tools=TOOLS)
    demo = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3*4"}}}]},
            {"role": "tool", "content": "12"}, {"role": "assistant", "content": "12"}]
    task = Task(id="t", prompt="3*4=", answer="12", demonstration=demo)
    ids, trained = env.sft_example(task)
    prompt = env.prompt_ids(task)
    assert ids[: len(prompt)] == prompt and not any(trained[: len(prompt)])
    assert env.demonstration_turns(task) == ["<<calculator: 3*4>>", "12"]
    taught = tokenizer.decode([i for i, t in zip(ids, trained) if t], skip_special_tokens=True)
    assert taught == "<<calculator: 3*4>>12"


def test_results_as_text():
    assert result_text("12") == "12" and result_text(12) == "12" and result_text({"a": [1]}) == '{"a": [1]}'
    assert result_text(None) == "" and result_text({1, 2}).startswith("{")
