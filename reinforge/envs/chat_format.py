"""Chat formatting in tokens: prompts, observations appended mid-episode, assistant turns for SFT.

The tokenizer's own chat template is used when it has one (tool messages and tool schemas
included, as `apply_chat_template` takes them); otherwise the project's simple template below,
which closes each turn with the tokenizer's end-of-sequence token.

An observation (tool results, env feedback) is the text the template writes between the end of
one assistant turn and the start of the next: it is found by rendering a conversation with and
without the new messages and taking the difference, then tokenized once. The policy's own turns
are never rendered or re-tokenized: its sampled tokens (ending with the end-of-turn token) stay
in the episode as they are, which is what keeps training log-probs equal to sampling log-probs.

Every string that goes into the template (message text, tool calls, tool schemas) is marked first
(reinforge.envs.control_tokens), so a special token written inside content, e.g. a tool output
holding `<|im_start|>user`, is encoded as text and cannot forge a turn. `render` returns that
marked text: slice it and hand the pieces to `encode`.
Every env, adapter and the gateway tokenize conversations through this class.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from transformers import PreTrainedTokenizerBase

from reinforge.envs.control_tokens import OPEN, ControlTokenError, ControlTokens

FALLBACK_CHAT_TEMPLATE = (
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)

TRUNCATED = " [truncated]"  # appended to a clipped observation
_MARK = "\u2063reinforge-assistant-turn\u2063"  # a string no template writes by itself


class ChatFormatError(ValueError):
    pass


class ChatFormat:
    """Renders messages with one template, and splits it into what the policy samples (assistant
    turns, each closed by `end_of_turn_id`) and what the env appends (everything else)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, tools: list[dict] | None = None):
        self.tokenizer = tokenizer
        self.template = tokenizer.chat_template or FALLBACK_CHAT_TEMPLATE
        self.control = ControlTokens(tokenizer)
        self.tools = self.control.mark(tools) if tools else None
        self.end_of_turn_id, self._turn_close = self._find_end_of_turn()
        self._turn_close_re = re.compile(f"(?<!{OPEN}){re.escape(self._turn_close)}")

    @property
    def turn_close(self) -> str:
        """The end-of-turn token as the template writes it after an assistant turn's content."""
        return self._turn_close

    def find_turn_close(self, rendered: str, start: int = 0, last: bool = False) -> int:
        """Where the template writes its end-of-turn token in `rendered` (from `start`; the last one
        when `last`), -1 when nowhere. The same token written inside a message is marked text and is
        skipped: an assistant message holding "<|im_end|>" must not end its turn early."""
        found = [m.start() for m in self._turn_close_re.finditer(rendered, start)]
        return (found[-1] if last else found[0]) if found else -1

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        """The template's text, special tokens inside the messages marked as text (see the module docstring)."""
        return self.tokenizer.apply_chat_template(
            self.control.mark(messages), tools=self.tools, chat_template=self.template, tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        """Rendered template text (or a slice of it) to ids: the template's special tokens are control
        tokens, the ones inside message text are text."""
        try:
            return self.control.encode(text)
        except ControlTokenError as err:
            raise ChatFormatError(str(err)) from None

    def clip(self, content: str, max_tokens: int) -> str:
        """`content` (a tool's or env's reply) cut to its first `max_tokens` tokens as text, marked
        as truncated: an observation cannot fill the context."""
        try:
            ids = self.control.text_ids(content)
        except ControlTokenError as err:
            raise ChatFormatError(str(err)) from None
        if len(ids) <= max_tokens:
            return content
        return self.tokenizer.decode(ids[:max_tokens]) + TRUNCATED

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The conversation so far, ending with the generation prompt of an assistant turn."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def assistant_ids(self, content: str) -> list[int]:
        """A demonstrated assistant turn as the policy would sample it: content, then end of turn."""
        try:
            return self.control.text_ids(content) + [self.end_of_turn_id]
        except ControlTokenError as err:
            raise ChatFormatError(str(err)) from None

    def observation_ids(self, messages: list[dict]) -> list[int]:
        """What follows a finished assistant turn: `messages` (tool results, user feedback) and
        the generation prompt of the next assistant turn."""
        if not messages:
            raise ChatFormatError("an observation needs at least one message")
        base = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK}]
        closed = self.render(base, add_generation_prompt=False)
        cut = closed.index(_MARK) + len(_MARK) + len(self._turn_close)
        full = self.render(base + list(messages), add_generation_prompt=True)
        if not full.startswith(closed[:cut]):
            raise ChatFormatError(
                "the chat template renders an earlier assistant turn differently once messages follow it, so "
                "observations cannot be appended token by token; use a template that keeps past turns as they are"
            )
        return self.encode(full[cut:])

    def demonstration_ids(
        self,
        prompt_ids: list[int],
        messages: list[dict],
        assistant_text: Callable[[dict], str] | None = None,
        observation: Callable[[list[dict]], list[int]] | None = None,
    ) -> tuple[list[int], list[bool]]:
        """A warm-up example in tokens, laid out as an episode produces them: the prompt, then each
        assistant message as a trained turn (closed by the end-of-turn token), and the messages
        between two of them (tool results, the env's replies) as one observation, not trained.
        `assistant_text` writes a message as the policy would (default: its content),
        `observation` tokenizes the messages between turns (default: observation_ids)."""
        assistant_text = assistant_text or (lambda message: str(message.get("content") or ""))
        observation = observation or self.observation_ids
        ids, trained, pending = list(prompt_ids), [False] * len(prompt_ids), []
        for message in messages:
            if message.get("role") != "assistant":
                pending.append(message)
                continue
            if pending:
                replies = observation(pending)
                ids += replies
                trained += [False] * len(replies)
                pending = []
            turn = self.assistant_ids(assistant_text(message))
            ids += turn
            trained += [True] * len(turn)
        return ids, trained

    def _find_end_of_turn(self) -> tuple[int, str]:
        """The special token the template writes right after an assistant turn's content."""
        closed = self.render(
            [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK}], add_generation_prompt=False
        )
        after = closed[closed.index(_MARK) + len(_MARK):]
        ids = self.encode(after)
        special = set(self.tokenizer.all_special_ids) | {
            i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special
        }
        if not ids or ids[0] not in special:
            raise ChatFormatError(
                f"the chat template closes assistant turns with {after[:20]!r}, which does not start with a special "
                "token; multi-turn rollout needs one end-of-turn token to stop on"
            )
        token = self.tokenizer.convert_ids_to_tokens(ids[0])
        if not after.startswith(token):
            raise ChatFormatError(f"end-of-turn token {token!r} is not written literally by the chat template")
        return ids[0], token
