"""The Engine protocol: token ids in, sampled token ids + behaviour log-probs out.

What every engine (the in-process TorchEngine, the Ray rollout workers, vLLM) carries, so that a
feature written against the protocol runs on all of them:

- Sampling with per-row budgets (`budgets`), and abort / resume of partial generations
  (`stop_when`): a row cut short by the stop rule comes back with the tokens it sampled and
  finish reason "aborted"; feeding prompt + those tokens back with what is left of the budget
  resumes it (reinforge.rollout.partial). A stop rule is called with the rows finished so far
  (bool [rows]) each time a row finishes; over several devices it must split per device
  (`split(devices)`, reinforge.rollout.partial.GroupQuota).
- Versioned weights: `sync_weights(version)` takes the learner's live weights now;
  `stage_weights(version)` takes them for the engine's next own sample (an engine whose device
  another lane is using does not wait for it); `lane()` gives another user of the engine weights
  of its own, loaded as a named state dict under a version (`WeightLane.load_weights(state,
  version)`), so the async producer samples with an older snapshot without a model of its own
  where the engine holds weights outside the trainer (Ray actors, vLLM: engines/weight_sync.py).
- Optional, declared by `supports_decode_hook`: a hook called every few decode steps that may
  stop rows (reinforge.engines.decode_hook; rollout pruning, which on an engine without it checks
  between chunks of sampling: reinforge.rollout.pruned_sampling), and `release_memory()`
  (release_sampling_memory).
"""

from __future__ import annotations

from collections.abc import Callable
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


class WeightLane(Protocol):
    """One user of an engine with weights of its own (see `Engine.lane`)."""

    policy_version: int

    def load_weights(self, state: dict, version: int) -> None:
        """Sample with `state` (parameter name -> tensor, the learner's names) as policy `version` from now on."""
        ...

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
        budgets: list[int] | None = None, stop_when: Callable | None = None,
    ) -> list[Generation]: ...


class Engine(Protocol):
    policy_version: int
    supports_decode_hook: bool  # generate takes `decode_hook` (reinforge.engines.decode_hook)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
        budgets: list[int] | None = None, stop_when: Callable | None = None,
    ) -> list[Generation]:
        """Sample one completion per prompt (repeat a prompt to sample a group). `budgets`: each
        row's own cap on new tokens (<= params.max_new_tokens); `stop_when`: the partial-rollout
        stop rule (module docstring): rows still running when it fires come back "aborted"."""
        ...

    def sync_weights(self, version: int) -> None:
        """Take the learner's current weights as policy `version`, loaded now."""
        ...

    def stage_weights(self, version: int) -> None:
        """As sync_weights, but the load may wait for this engine's next own `generate`."""
        ...

    def lane(self) -> WeightLane:
        """Another user of this engine, with weights of its own (the async rollout producer's)."""
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
