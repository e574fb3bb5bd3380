"""ChatFormat: prompts, observations and assistant turns in tokens, for three kinds of template."""

from __future__ import annotations

import copy

import pytest

from reinforge.envs.chat_format import ChatFormat, ChatFormatError

# A ChatML template (Qwen style): the end-of-turn token is followed by a newline that belongs to
# the next message, which is what the observation delta must pick up.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture()
def chatml_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML
    return tok


def test_tiny_tokenizer_template_prompt_and_end_of_turn(tokenizer) -> None:
    chat = ChatFormat(tokenizer)
    assert tokenizer.convert_ids_to_tokens(chat.end_of_turn_id) == "<|end|>"
    ids = chat.prompt_ids([{"role": "user", "content": "12+3="}])
    assert tokenizer.convert_ids_to_tokens(ids) == ["<bos>", "<|user|>", "1", "2", "+", "3", "=", "<|end|>", "<|assistant|>"]
    assert chat.assistant_ids("15") == tokenizer("15", add_special_tokens=False).input_ids + [chat.end_of_turn_id]
    obs = chat.observation_ids([{"role": "tool", "content": "15"}])
    assert tokenizer.convert_ids_to_tokens(obs) == ["<|tool|>", "1", "5", "<|end|>", "<|assistant|>"]


@pytest.mark.parametrize("template", ["tiny", "chatml"])
def test_pieces_concatenate_to_the_rendered_conversation(template, tokenizer, chatml_tokenizer) -> None:
    # prompt + assistant turn + observation + assistant turn == the whole conversation rendered at once
    tok = tokenizer if template == "tiny" else chatml_tokenizer
    chat = ChatFormat(tok, tools=[{"type": "function", "function": {"name": "calculator"}}])
    conversation = [
        {"role": "user", "content": "12*34="},
        {"role": "assistant", "content": "<<calculator: 12*34>>"},
        {"role": "tool", "content": "408"},
        {"role": "assistant", "content": "408"},
    ]
    pieces = (
        chat.prompt_ids(conversation[:1])
        + chat.assistant_ids(conversation[1]["content"])
        + chat.observation_ids(conversation[2:3])
        + chat.assistant_ids(conversation[3]["content"])
    )
    whole = chat.encode(chat.render(conversation, add_generation_prompt=False))
    # the whole rendering may end with text after the last end-of-turn token (ChatML's newline)
    assert whole[: len(pieces)] == pieces
    assert tok.decode(whole[len(pieces):]).strip() == ""


def test_chatml_observation_starts_with_the_newline_after_end_of_turn(chatml_tokenizer) -> None:
    chat = ChatFormat(chatml_tokenizer)
    assert chatml_tokenizer.convert_ids_to_tokens(chat.end_of_turn_id) == "<|im_end|>"
    text = chatml_tokenizer.decode(chat.observation_ids([{"role": "tool", "content": "7"}]))
    assert text == "\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"


def test_fallback_template_closes_turns_with_eos(tokenizer) -> None:
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    chat = ChatFormat(tok)
    assert chat.end_of_turn_id == tok.eos_token_id
    assert tok.decode(chat.observation_ids([{"role": "tool", "content": "7"}])) == "<|tool|>7<eos><|assistant|>"


def test_templates_that_cannot_be_appended_to_are_refused(tokenizer) -> None:
    tok = copy.deepcopy(tokenizer)
    # closes assistant turns with plain text: nothing to stop on
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(ChatFormatError, match="special"):
        ChatFormat(tok)
    # rewrites earlier assistant turns once more messages follow (like templates that strip reasoning)
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}<|assistant|>(hidden)<|end|>"
        "{% else %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    with pytest.raises(ChatFormatError, match="differently"):
        ChatFormat(tok).observation_ids([{"role": "tool", "content": "1"}])
