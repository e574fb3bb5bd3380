"""A prompt too long for the model's context, found from its length in characters before it is tokenized.

Tokenizing is the slow part of preparing a request (a 4 MB conversation took 18 s): a prompt that
cannot fit is refused from its text alone. No token of a tokenizer covers more characters than its
longest vocabulary string (byte-level BPE writes one character per byte and decodes a byte to at
most one character; SentencePiece pieces decode to at most their own length), so a text of n
characters is at least ceil(n / longest) tokens. When that lower bound alone fills the context,
the request gets the same `context_length_exceeded` error as a tokenized prompt would, at once.
A prompt under the bound is tokenized (off the serving thread) and checked exactly as before.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from reinforge.envs.control_tokens import CLOSE, OPEN
from reinforge.gateway.wire import GatewayError


def longest_token_chars(tokenizer: PreTrainedTokenizerBase) -> int:
    """The most characters one token of `tokenizer` can stand for (see the module docstring)."""
    return max(1, max((len(token) for token in tokenizer.get_vocab()), default=1))


class PromptBound:
    """`check(text, known_tokens)` refuses a prompt whose text alone cannot fit `max_context_tokens`."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_context_tokens: int | None):
        self.max_context_tokens = max_context_tokens
        self.chars_per_token = longest_token_chars(tokenizer)

    def check(self, text: str, known_tokens: int = 0) -> None:
        """`text`: what is about to be tokenized (a rendered chat may hold control-token marks, which
        are no characters of the prompt); `known_tokens`: tokens the prompt already has before it."""
        if self.max_context_tokens is None:
            return
        chars = len(text) - text.count(OPEN) - text.count(CLOSE)
        at_least = known_tokens + -(-chars // self.chars_per_token)
        if at_least >= self.max_context_tokens:
            raise GatewayError(
                400, f"the prompt is {chars} characters, so at least {at_least} tokens (no token of this tokenizer "
                     f"covers more than {self.chars_per_token} characters); this model's context is "
                     f"{self.max_context_tokens} tokens, which leaves no room for a completion",
                param="messages", code="context_length_exceeded")
