"""The Engine protocol: token ids in, sampled token ids + behaviour log-probs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature=0 means greedy.

    Behaviour log-probs are log softmax(logits / temperature) of the sampled token, before top-k /
    top-p truncation, so the learner can recompute exactly the same quantity from the same tokens.
    """

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if not self.temperature >= 0:  # also rejects NaN, which would only fail later, mid-sampling
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


@dataclass
class Generation:
    """One completion: sampled ids (a final stop token included), their log-probs, why it ended."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "aborted" (a partial rollout cut short, to be resumed)
    policy_version: int = 0
    errors: list[str] = field(default_factory=list)


class Engine(Protocol):
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        """Sample one completion per prompt (repeat a prompt to sample a group)."""
        ...

    def sync_weights(self, version: int) -> None:
        """Take the learner's current weights as policy `version`."""
        ...

    # Optional: `release_memory()` frees what the engine holds only for sampling (a weight copy,
    # caches) until its next `generate`. See release_sampling_memory.


def release_sampling_memory(engine: Engine) -> None:
    """Between a step's rollout and its update, let an engine that offers it (`release_memory`) free
    what it holds only for sampling, so that the update does not carry it (a loop's next `sync_weights`
    follows the update)."""
    release = getattr(engine, "release_memory", None)
    if release is not None:
        release()
