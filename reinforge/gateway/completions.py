"""Sampled ids -> the text of an OpenAI choice, its stop-string cut, and its per-token log-probs.

The ids the engine sampled are the truth; text is derived from them, never the other way round.
A stop string (`stop` in the request) ends the choice at the token where the text first contains
it: the content is the text before the stop string, and the trajectory keeps the sampled tokens
through that token (they were sampled; the ones after were not seen by the agent, so they are
dropped). A final stop token (end of turn, end of sequence) is not content. `logprobs.content`
lists the content tokens with the engine's behaviour log-prob of each and the token's own bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from reinforge.engines.base import Generation
from reinforge.gateway.wire import ChoiceLogprobs, TokenLogprob


@dataclass
class SampledChoice:
    kept_ids: list[int]  # what the trajectory keeps (cut after the token completing a stop string)
    logprobs: list[float]  # behaviour log-probs of kept_ids
    content_ids: list[int]  # kept ids without a final stop token: what the content is decoded from
    content: str
    finish_reason: str  # "stop" | "length"


class SampledText:
    """Decodes sampled ids with one tokenizer (the server thread's own copy)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        self._byte_decoder = byte_level_decoder(tokenizer)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def choice(self, gen: Generation, stop_ids: tuple[int, ...], stop_strings: list[str]) -> SampledChoice:
        ids, logprobs = list(gen.token_ids), list(gen.logprobs)
        finish = "stop" if gen.finish_reason == "stop" else "length"  # "aborted" (partial rollouts): cut short
        ended = finish == "stop" and bool(ids) and ids[-1] in stop_ids
        content_ids = ids[:-1] if ended else ids
        text = self.decode(content_ids)
        if stop_strings and any(s in text for s in stop_strings):
            for end in range(1, len(content_ids) + 1):
                prefix = self.decode(content_ids[:end])
                hits = [prefix.find(s) for s in stop_strings if s in prefix]
                if hits:
                    return SampledChoice(ids[:end], logprobs[:end], content_ids[:end], prefix[: min(hits)], "stop")
        return SampledChoice(ids, logprobs, content_ids, text, finish)

    def logprobs(self, choice: SampledChoice) -> ChoiceLogprobs:
        entries = []
        for token_id, logprob in zip(choice.content_ids, choice.logprobs):
            raw = self.token_bytes(token_id)
            entries.append(TokenLogprob(token=raw.decode("utf-8", errors="replace"), logprob=logprob, bytes=list(raw)))
        return ChoiceLogprobs(content=entries)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's own bytes (a byte-level BPE token may hold part of a UTF-8 character, which a
        decode would turn into U+FFFD); the decoded text's bytes for other tokenizers."""
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if self._byte_decoder is not None and isinstance(piece, str) and all(c in self._byte_decoder for c in piece):
            return bytes(self._byte_decoder[c] for c in piece)
        return self.tokenizer.decode([token_id]).encode("utf-8")


def byte_level_decoder(tokenizer: PreTrainedTokenizerBase) -> dict[str, int] | None:
    """GPT-2's printable-character alphabet -> byte, when the tokenizer decodes byte-level BPE."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ != "ByteLevel":
        return None
    # The GPT-2 byte <-> unicode table (Radford et al. 2019, encoder.py): printable bytes stand for
    # themselves, the other 68 are shifted past 255.
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table, shift = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + shift)] = byte
            shift += 1
    return table
