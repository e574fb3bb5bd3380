"""A tokenizer trained in-process with `tokenizers`, wrapped as a Hugging Face fast tokenizer.

Byte-level BPE (any text encodes, nothing is <unk>) with digits split one per token: numbers
then share a small vocabulary of digit tokens, which is what lets a tiny model learn arithmetic.

The tokenizer ships a chat template (`TINY_CHAT_TEMPLATE`) whose role markers are single special
tokens, added after the trained vocabulary so the BPE ids do not move: a tiny model then learns
turn structure from one token per marker, and `<|end|>` closes every turn (the stop token).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = [PAD, BOS, EOS]
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]

# No trained token is longer than this many bytes (and no special token is either), so a text of
# n characters is at least n / MAX_TOKEN_CHARS tokens: an over-long prompt is found from its
# length, before a tokenizer is trained on it. Arithmetic and tool-trace vocabularies stay far
# below it (13 characters at most, a role token), so the cap changes none of their merges.
MAX_TOKEN_CHARS = 16

# Tools, when given, are listed by name in a system turn (a tiny model cannot read JSON schemas;
# what it needs is the names it may call). Unknown roles are an error, not a silent fallback.
TINY_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if tools %}<|system|>tools: {% for t in tools %}{{ (t.function or t).name }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}<|end|>{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown chat role: ' + m.role) }}{% endif %}"
    "<|{{ m.role }}|>{{ m.content }}<|end|>"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `texts`; `tokenizer(text)` prepends <bos>."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=MAX_TOKEN_CHARS,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos_id)])
    tokenizer.add_special_tokens(ROLE_TOKENS)  # after training: the BPE ids stay where they are
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="left",
        chat_template=TINY_CHAT_TEMPLATE,
    )
