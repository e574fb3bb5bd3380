"""A tiny reward model trained in seconds: does "a+b=c" hold?

A `LlamaForSequenceClassification` (num_labels=1) is trained with the Bradley-Terry pairwise
loss  -log sigmoid(r(a+b=a+b) - r(a+b=c_wrong))  on operands in [0, max_operand), so that correct
sums score higher than wrong ones. It exists to test `RewardModelReward` end to end without
downloads. With the defaults it learns the operand pairs it saw (fresh wrong answers included);
it does not learn addition well enough in seconds to judge (a, b) pairs it never saw.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForSequenceClassification

from reinforge.models.tiny_llama import PRESETS
from reinforge.models.tokenizer import train_tokenizer


def sum_pair(a: int, b: int, rng: random.Random, max_operand: int) -> tuple[str, str]:
    """(correct text, wrong text) for a + b; the wrong answer is near the true sum."""
    wrong = a + b
    while wrong == a + b:
        wrong = max(0, a + b + rng.choice([-3, -2, -1, 1, 2, 3]))
    return f"{a}+{b}={a + b}", f"{a}+{b}={wrong}"


def train_tiny_reward_model(
    out_dir: str | Path,
    steps: int = 300,
    seed: int = 0,
    max_operand: int = 5,
    batch_pairs: int = 32,
    preset: str = "nano",
    lr: float = 1e-3,
    held_out: set[tuple[int, int]] | None = None,
) -> Path:
    """Train on pairs with operands in [0, max_operand), skipping `held_out` (a, b) pairs, and save
    model + tokenizer to `out_dir` with `save_pretrained`. Returns the directory."""
    rng = random.Random(seed)
    held_out = held_out or set()
    operands = [(a, b) for a in range(max_operand) for b in range(max_operand) if (a, b) not in held_out]
    if not operands:
        raise ValueError("train_tiny_reward_model: every (a, b) pair is held out")
    corpus = [f"{a}+{b}={c}" for a in range(max_operand) for b in range(max_operand) for c in range(2 * max_operand)]
    tokenizer = train_tokenizer(corpus)
    hidden, layers, heads, kv_heads, mlp = PRESETS[preset]
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, num_labels=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        model.train()
        for _ in range(steps):
            pairs = [sum_pair(*rng.choice(operands), rng, max_operand) for _ in range(batch_pairs)]
            texts = [good for good, _ in pairs] + [bad for _, bad in pairs]
            batch = tokenizer(texts, padding=True, return_tensors="pt")
            rewards = model(**batch).logits[:, 0]
            loss = -F.logsigmoid(rewards[:batch_pairs] - rewards[batch_pairs:]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
