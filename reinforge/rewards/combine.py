"""How named reward parts become one scalar reward: a pure function, set by `reward.combine`,
`reward.gates` and `reward.clip`.

    gated_i  = v_i  if every gate on part i holds (v_requires >= threshold), else 0
    weighted_sum:  R = sum_i w_i * gated_i
    product:       R = prod_i (w_i * gated_i)
    then, if clip = (lo, hi):  R = min(max(R, lo), hi)

Gates read the *ungated* values of the parts they require, so their order does not matter and a
gate never depends on another gate. A part with several gates counts only when all of them hold.
With `product`, one part at 0 (or gated off) makes the whole reward 0: use it for "all of these
must hold" rewards, e.g. correct (0/1) x well-formatted (0/1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

CombineMode = Literal["weighted_sum", "product"]
COMBINE_MODES: tuple[str, ...] = ("weighted_sum", "product")


class GateLike(Protocol):
    part: str
    requires: str
    threshold: float


@dataclass(frozen=True)
class Gate:
    """Part `part` counts only when part `requires` scores >= `threshold` (else it contributes 0)."""

    part: str
    requires: str
    threshold: float


def apply_gates(parts: Mapping[str, float], gates: Iterable[GateLike] = ()) -> dict[str, float]:
    """The parts with every gated-off part set to 0 (gates read the ungated values)."""
    gated = dict(parts)
    for gate in gates:
        if gate.part not in parts or gate.requires not in parts:
            missing = gate.part if gate.part not in parts else gate.requires
            raise KeyError(f"reward gate names unknown part {missing!r}; parts: {', '.join(sorted(parts))}")
        if not parts[gate.requires] >= gate.threshold:
            gated[gate.part] = 0.0
    return gated


def combine(
    parts: Mapping[str, float],
    weights: Mapping[str, float],
    mode: CombineMode = "weighted_sum",
    gates: Iterable[GateLike] = (),
    clip: tuple[float, float] | None = None,
) -> float:
    """One scalar from named parts (see the module docstring for the formula).

    `weights` names the parts that count; every one of them must be in `parts`.
    """
    gated = apply_gates(parts, gates)
    missing = [name for name in weights if name not in gated]
    if missing:
        raise KeyError(f"reward parts missing: {missing}; have: {', '.join(sorted(gated))}")
    if mode == "weighted_sum":
        total = sum(weights[name] * gated[name] for name in weights)
    elif mode == "product":
        total = math.prod(weights[name] * gated[name] for name in weights)
    else:
        raise ValueError(f"unknown reward combine mode {mode!r}; valid: {', '.join(COMBINE_MODES)}")
    if clip is not None:
        low, high = clip
        if low > high:
            raise ValueError(f"reward clip needs low <= high, got {clip}")
        total = min(max(total, low), high)
    return float(total)
