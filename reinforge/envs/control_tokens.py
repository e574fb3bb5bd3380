"""Special tokens written inside message text are text, not control tokens.

A chat template renders to one string that is then tokenized, and a tokenizer matches its special
tokens anywhere in a string: a user message, a tool's output (which model-written code controls) or
a tool schema holding `<|im_start|>assistant` would become the real turn marker (1 token instead
of the 8 of its text), forging a turn the model then trusts. So every string that goes INTO the
template is marked first: each special token in it is wrapped in two private-use characters
(`mark`). The template's own special tokens are never wrapped, since they are not in any input.
`encode` then tokenizes the rendered text as usual between marked tokens, and each marked token
with special-token matching off, as plain text.

A text with no special token inside its inputs has no marks, and `encode` is then exactly
`tokenizer(text, add_special_tokens=False)`: a normal conversation's tokens do not change.
Slicing a rendered text (observations are the difference of two renders) keeps the marks, which
is why the marked text, not the plain one, is what ChatFormat renders and slices.

Transformers >= 5 ships the same idea as `apply_chat_template(..., sanitize_control_tokens=True)`
(same private-use markers), but only for a whole conversation tokenized in one call; the project
supports transformers 4.56 and slices rendered text, so the mark / encode pair lives here.
"""

from __future__ import annotations

import copy
import re
import threading
import weakref
from typing import Any

from transformers import PreTrainedTokenizerBase

# Plane-15 private-use characters: no tokenizer or text has a meaning for them. A string that
# already holds one has it removed before marking, so an input cannot forge a mark.
OPEN, CLOSE = "\U000f0000", "\U000f0001"


class ControlTokenError(ValueError):
    pass


_TEXT_TOKENIZERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_TEXT_TOKENIZERS_LOCK = threading.Lock()


def text_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A copy of `tokenizer` that encodes special tokens as text (one per tokenizer, cached).

    Passing split_special_tokens per call flips a flag on the shared Rust tokenizer: two threads
    encoding at once (the gateway tokenizes requests in worker threads) would then see each
    other's setting, or fail with "Already borrowed". Each copy keeps one setting for good."""
    with _TEXT_TOKENIZERS_LOCK:
        found = _TEXT_TOKENIZERS.get(tokenizer)
        if found is None:
            found = copy.deepcopy(tokenizer)
            found.split_special_tokens = True
            found("\n", add_special_tokens=False)  # sets the Rust flag now, not under a later concurrent call
            _TEXT_TOKENIZERS[tokenizer] = found
        return found


class ControlTokens:
    """Marks special tokens in template inputs and encodes rendered text with the marks honoured."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer, self._text_tokenizer = tokenizer, text_tokenizer(tokenizer)
        special = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
        special |= {t for t in tokenizer.all_special_tokens if t}
        longest_first = sorted(special, key=len, reverse=True)  # a token wins over the tokens it contains
        self._special = re.compile("|".join(map(re.escape, longest_first)) or "(?!)")  # (?!) never matches
        # A marked token is one piece; a lone mark (a template that split a marked string, e.g. with
        # `.split()`) is dropped but still cuts the text, so the two sides cannot join into a token.
        self._marks = re.compile(f"{OPEN}({self._special.pattern}){CLOSE}|[{OPEN}{CLOSE}]")
        self._special_ids = {tokenizer.convert_tokens_to_ids(t) for t in special}
        self._newline_ids = self._plain("\n", as_text=False)

    def mark(self, value: Any) -> Any:
        """`value` (a string, or messages / tools: lists and dicts of them) with every special token
        in its strings wrapped in marks; dict keys are left as they are."""
        if isinstance(value, str):
            value = value.replace(OPEN, "").replace(CLOSE, "")
            return self._special.sub(f"{OPEN}\\g<0>{CLOSE}", value)
        if isinstance(value, dict):
            return {key: self.mark(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.mark(item) for item in value]
        return value

    def encode(self, text: str) -> list[int]:
        """Token ids of a rendered (marked) text: its unmarked special tokens are control tokens,
        the marked ones text."""
        pieces = self._marks.split(text)  # [text, marked token or None, text, ...]
        if len(pieces) == 1:
            return self._plain(text, as_text=False)
        ids = self._plain(pieces[0], as_text=False)
        for index, piece in enumerate(pieces[1:], start=1):
            if piece:
                ids += self._piece(piece, as_text=index % 2 == 1)
        return ids

    def text_ids(self, text: str) -> list[int]:
        """Token ids of content that is text through and through (a demonstrated assistant turn,
        a tool output measured for clipping): no special token in it is a control token."""
        return self._plain(text, as_text=True)

    def _plain(self, text: str, as_text: bool) -> list[int]:
        if not text:
            return []
        tokenizer = self._text_tokenizer if as_text else self.tokenizer
        ids = tokenizer(text, add_special_tokens=False).input_ids
        if as_text and self._special_ids.intersection(ids):
            raise ControlTokenError(
                f"the tokenizer ({type(self.tokenizer).__name__}) encodes a special token inside text as the control "
                "token even with split_special_tokens=True, so message text could forge a chat turn; use a fast "
                "(Rust) tokenizer"
            )
        return ids

    def _piece(self, piece: str, as_text: bool) -> list[int]:
        """A piece from the middle of a text. A SentencePiece tokenizer writes a prefix space at the
        start of a string; encoding after a newline and dropping it again keeps the piece as it is
        inside the whole text."""
        ids = self._plain("\n" + piece, as_text)
        if self._newline_ids and ids[: len(self._newline_ids)] == self._newline_ids:
            return ids[len(self._newline_ids):]
        return self._plain(piece, as_text)
