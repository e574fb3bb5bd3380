"""EpisodeRecorder on its own (no HTTP): join, split, template rewrites, cut samples, branches."""

from __future__ import annotations

import copy

import pytest

from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway.recorder import EpisodeRecorder, Sample

# Like Qwen3 dropping past thinking: an assistant turn followed (later) by a user message is
# rendered empty, so history is rewritten once the user speaks; a tool reply keeps it as it was.
REWRITING_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and (messages[loop.index0 + 1:] | selectattr('role', 'equalto', 'user') | list) %}"
    "<|assistant|><|end|>"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)

USER = [{"role": "user", "content": "12*34="}]


def sample(tokenizer, chat, text, ended=True, logprob=-0.5, version=1):
    ids = tokenizer(text, add_special_tokens=False).input_ids + ([chat.end_of_turn_id] if ended else [])
    message = {"role": "assistant", "content": text}
    return Sample(ids, [logprob] * len(ids), "stop" if ended else "length", version, message, dict(message))


def call(recorder, messages, samples):
    plan = recorder.plan(messages, None, messages)
    recorder.record(plan, samples)
    return plan


def test_append_only_calls_with_a_tool_turn_join_into_one_exact_chain(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    first = sample(tokenizer, chat, "<<calculator: 12*34>>", version=3)
    plan0 = call(recorder, USER, [first])
    assert plan0.prompt_ids == chat.prompt_ids(USER) and not plan0.split
    history = USER + [first.response, {"role": "tool", "content": "408"}]
    second = sample(tokenizer, chat, "408", logprob=-0.25, version=4)
    plan1 = call(recorder, history, [second])
    observation = chat.observation_ids([{"role": "tool", "content": "408"}])
    assert plan1.join is not None and plan1.observation_ids == observation

    (part,) = recorder.parts()
    prompt = chat.prompt_ids(USER)
    assert part.token_ids == prompt + first.token_ids + observation + second.token_ids
    assert part.loss_mask == [False] * len(prompt) + [True] * len(first.token_ids) + [False] * len(observation) + [True] * len(second.token_ids)
    assert part.logprobs == [0.0] * len(prompt) + first.logprobs + [0.0] * len(observation) + second.logprobs
    end0 = len(prompt) + len(first.token_ids)
    assert part.turn_spans == [(len(prompt), end0), (end0 + len(observation), len(part.token_ids))]
    assert part.prompt_length == len(prompt) and part.calls == 2 and part.policy_version == 3
    assert part.messages == history + [second.response_raw]
    assert not part.starts_with_split and not part.branch and recorder.splits == 0


def test_an_agent_that_edits_history_starts_a_second_part_and_the_split_is_counted(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    first = sample(tokenizer, chat, "1+1")
    call(recorder, USER, [first])
    summarized = [{"role": "user", "content": "12*34= (you tried 1+1)"}]
    second = sample(tokenizer, chat, "408")
    plan = call(recorder, summarized, [second])
    assert plan.join is None and plan.split and plan.prompt_ids == chat.prompt_ids(summarized)
    assert recorder.splits == 1 and recorder.splits_by_reason == {"history_not_append_only": 1}
    a, b = recorder.parts()
    assert not a.starts_with_split and b.starts_with_split
    assert b.token_ids == chat.prompt_ids(summarized) + second.token_ids and b.prompt_length == len(chat.prompt_ids(summarized))
    # An edited assistant message is an edit too, even with the rest appended.
    edited = USER + [{"role": "assistant", "content": "1+2"}, {"role": "tool", "content": "2"}]
    assert call(recorder, edited, [sample(tokenizer, chat, "7")]).split and recorder.splits == 2


def test_a_template_that_rewrites_an_earlier_turn_splits_instead_of_joining(tokenizer) -> None:
    rewriting = copy.deepcopy(tokenizer)
    rewriting.chat_template = REWRITING_TEMPLATE
    recorder, chat = EpisodeRecorder(rewriting), ChatFormat(rewriting)
    first = sample(rewriting, chat, "<<calculator: 12*34>>")
    call(recorder, USER, [first])
    # A tool reply keeps the assistant turn as it was: join.
    with_tool = USER + [first.response, {"role": "tool", "content": "408"}]
    second = sample(rewriting, chat, "408")
    assert call(recorder, with_tool, [second]).join is not None
    # The user speaks: the template now renders both assistant turns empty, which is not what
    # was sampled, so the chain cannot go on token by token.
    with_user = with_tool + [second.response, {"role": "user", "content": "and 2*3?"}]
    plan = call(recorder, with_user, [sample(rewriting, chat, "6")])
    assert plan.join is None and plan.split and plan.prompt_ids == chat.prompt_ids(with_user)
    assert recorder.splits_by_reason == {"template_rewrites_history": 1}
    first_part, second_part = recorder.parts()
    assert first_part.calls == 2 and second_part.calls == 1 and second_part.starts_with_split


def test_a_sample_cut_by_length_gets_the_turn_closing_token_as_observation(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    cut = sample(tokenizer, chat, "40", ended=False)
    call(recorder, USER, [cut])
    plan = call(recorder, USER + [cut.response, {"role": "user", "content": "go on"}], [sample(tokenizer, chat, "8")])
    assert plan.observation_ids == [chat.end_of_turn_id] + chat.observation_ids([{"role": "user", "content": "go on"}])
    (part,) = recorder.parts()
    close = len(chat.prompt_ids(USER)) + len(cut.token_ids)
    assert part.token_ids[close] == chat.end_of_turn_id and not part.loss_mask[close]  # closed, not trained


def test_n_choices_branch_and_each_branch_can_be_continued(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    choices = [sample(tokenizer, chat, text) for text in ("1", "22", "333")]
    plan = call(recorder, USER, choices)
    assert recorder.branches == 2 and recorder.splits == 0
    main, b1, b2 = recorder.parts()
    assert not main.branch and b1.branch and b2.branch
    assert b1.token_ids == plan.prompt_ids + choices[1].token_ids and b1.prompt_length == len(plan.prompt_ids)
    # The agent picks choice 2 and goes on: that branch's chain continues.
    go_on = USER + [choices[2].response, {"role": "tool", "content": "ok"}]
    joined = call(recorder, go_on, [sample(tokenizer, chat, "4")])
    assert joined.join is not None and joined.prompt_ids[: len(b2.token_ids)] == b2.token_ids
    assert [p.calls for p in recorder.parts()] == [1, 1, 2]


def test_one_call_is_joined_once_and_a_released_plan_frees_it(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    first = sample(tokenizer, chat, "5")
    call(recorder, USER, [first])
    nxt = USER + [first.response, {"role": "tool", "content": "x"}]
    a = recorder.plan(nxt, None, nxt)
    b = recorder.plan(nxt, None, nxt)  # concurrent with a: X is taken, so b starts its own chain
    assert a.join is not None and b.join is None and b.split
    recorder.release(a)
    recorder.release(b)
    assert recorder.plan(nxt, None, nxt).join is not None


def test_changed_tools_split(tokenizer) -> None:
    recorder, chat = EpisodeRecorder(tokenizer), ChatFormat(tokenizer)
    first = sample(tokenizer, chat, "5")
    call(recorder, USER, [first])
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object", "properties": {}}}}]
    nxt = USER + [first.response, {"role": "tool", "content": "x"}]
    plan = recorder.plan(nxt, tools, nxt)
    assert plan.join is None and plan.split


def test_record_needs_a_sample(tokenizer) -> None:
    recorder = EpisodeRecorder(tokenizer)
    with pytest.raises(ValueError, match="at least one"):
        recorder.record(recorder.plan(USER, None, USER), [])
