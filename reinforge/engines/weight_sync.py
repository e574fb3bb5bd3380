"""Versioned, verified weights for engines that keep their own copy of them, and lanes over them.

The contract: weights travel as a named state dict under a version (one per RL step); whoever
loads them echoes (version, checksum of the tensors it now holds), and an echo that differs from
what was sent raises `WeightSyncError`. Every generation carries the version that sampled it.

Lanes. An engine whose device serves two users with different weights (held-out evaluation samples
with the learner's current weights while the async producer samples with an older snapshot) gives
the second user a lane (`lane()`): a view of the same device with weights of its own, loaded with
`load_weights(state, version)`. The device holds one set at a time, so `SharedWeights` runs every
call under one lock and first loads the caller's set if the device holds another one (same
version and checksum: nothing to load). Serializing is the simplest correct design: evaluation is
rare (`eval.every`), so a switch costs at most two loads per evaluation, and the producer needs no
model copy of its own. `stage_weights(version)` takes the learner's weights without loading them
(the device loads them when the engine itself next samples), so the learner never waits for the
producer's batch to publish.

The Ray rollout workers (`reinforge.distributed.ray_engine`) and the vLLM engine
(`reinforge.engines.vllm_engine`) build on `SharedWeights`; each says how a set is stored
(`_put`), loaded and verified (`_push`) and sampled (`_generate`).
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from reinforge.engines.base import Generation, SamplingParams
from reinforge.models.lora import merged_state_dict


class WeightSyncError(RuntimeError):
    """An engine holds other weights (version or checksum) than it was sent."""


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """BLAKE2b over every tensor's name, dtype, shape and bytes, in state_dict order."""
    digest = checksum_digest()
    for name, tensor in state.items():
        add_to_checksum(digest, name, tensor)
    return digest.hexdigest()


def checksum_digest():
    """A `state_checksum` computed as the tensors come (`add_to_checksum`), for a state received one tensor at a time."""
    return hashlib.blake2b(digest_size=16)


def add_to_checksum(digest, name: str, tensor: torch.Tensor) -> None:
    t = tensor.detach().cpu().contiguous()
    digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().data)


@dataclass(frozen=True)
class WeightSet:
    """One set of weights as an engine stores it (`payload`: a state dict, an object-store
    reference, ...), and what a load of it must echo."""

    payload: Any
    version: int
    checksum: str

    def same(self, other: WeightSet | None) -> bool:
        return other is not None and (self.version, self.checksum) == (other.version, other.checksum)


class SharedWeights(ABC):
    """The Engine protocol's weight half over a device that holds one weight set at a time.

    A subclass sets `self.model` (the learner's model, read at each stage / sync), calls
    `_init_weights()`, and implements `_put`, `_push` and `_generate` (see the module docstring).
    """

    model: Any
    policy_version: int

    def _init_weights(self) -> None:
        self._lock = threading.RLock()  # one caller at a time on the device (evaluation vs the async producer)
        self._mine: WeightSet | None = None  # the weights this engine's own `generate` samples with
        self._held: WeightSet | None = None  # what the device holds now
        self.policy_version = 0

    # ------------------------------------------------------------------ subclasses

    @abstractmethod
    def _put(self, state: dict[str, torch.Tensor], version: int) -> WeightSet:
        """Store `state` (which the caller may change afterwards) as a WeightSet."""

    @abstractmethod
    def _push(self, weights: WeightSet) -> None:
        """Load `weights` on the device, verify the echo and set `self._held` (the caller holds the lock)."""

    @abstractmethod
    def _generate(self, weights: WeightSet | None, prompts, params, seed, budgets, stop_when) -> list[Generation]:
        """Sample with `weights` (loading them first under the lock: `_hold`)."""

    # ------------------------------------------------------------------ the Engine protocol

    def stage_weights(self, version: int) -> None:
        """Take the learner model's current weights as `version`; the device loads them when this
        engine next samples (another lane may be using it meanwhile)."""
        self._mine = self._put(merged_state_dict(self.model), version)  # a LoRA policy's merged weights
        self.policy_version = version

    def sync_weights(self, version: int) -> None:
        """Take the learner model's current weights as `version` and load them now."""
        self.stage_weights(version)
        with self._lock:
            self._push(self._mine)

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        budgets: list[int] | None = None,
        stop_when: Callable | None = None,
    ) -> list[Generation]:
        return self._generate(self._mine, prompts, params, seed, budgets, stop_when)

    def lane(self) -> WeightLane:
        """Another user of this device, with weights of its own (the async rollout producer)."""
        return WeightLane(self)

    # ------------------------------------------------------------------ internals

    def _hold(self, weights: WeightSet | None) -> None:
        """Make the device hold `weights` (the caller holds the lock)."""
        if weights is None:
            raise WeightSyncError("no weights to sample with: sync_weights (or a lane's load_weights) was never called")
        if not weights.same(self._held):
            self._push(weights)

    @staticmethod
    def check_versions(generations: list[Generation], weights: WeightSet) -> list[Generation]:
        """Every generation was sampled by `weights`' version, or WeightSyncError."""
        stale = {g.policy_version for g in generations} - {weights.version}
        if stale:
            raise WeightSyncError(f"the engine sampled with policy version(s) {sorted(stale)} but was given version {weights.version}")
        return generations


class WeightLane:
    """A view of a `SharedWeights` engine's device with weights of its own: `load_weights` ships a
    snapshot (versioned and verified like a sync); `generate` samples with it, loading it again first
    if the device meanwhile served the engine's other user."""

    supports_decode_hook = False

    def __init__(self, engine: SharedWeights):
        self.owner = engine
        self.policy_version = engine.policy_version
        self._weights: WeightSet | None = engine._mine

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Sample with `state` (parameter name -> tensor, the learner's names) as policy `version` from now on."""
        weights = self.owner._put(state, version)
        with self.owner._lock:
            self.owner._hold(weights)
        self._weights, self.policy_version = weights, version

    def sync_weights(self, version: int) -> None:
        raise TypeError("a lane holds weight snapshots, not the learner's live model: use load_weights(state, version)")

    stage_weights = sync_weights

    def lane(self) -> WeightLane:
        return self.owner.lane()

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        budgets: list[int] | None = None,
        stop_when: Callable | None = None,
    ) -> list[Generation]:
        return self.owner._generate(self._weights, prompts, params, seed, budgets, stop_when)
