"""The run's engine during an evaluation, counting finished episodes for the progress display.

An evaluation samples every held-out task greedily and then `eval.samples` times, in a few large
engine calls that can take minutes each; without a counter the display sat at `RL 0/150` for 4
minutes. `EvalCounter` wraps the engine for one evaluation: on our PyTorch engine it watches rows
finish inside a call through the engine's `stop_when` hook (which it never uses to stop, so the
samples are exactly those without it); on other engines the count moves when a call returns.

The count is of episodes (greedy + sampled per task), for single-turn envs only: in multi-turn
envs a call's rows are turns, and agent envs (gateway, games) key their own servers by the engine
object, so there the engine is not wrapped and the display shows the evaluation running, uncounted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from reinforge.engines.torch_engine import TorchEngine


def eval_episode_total(env: Any, tasks: int, samples: int) -> int | None:
    """Episodes one evaluation samples, or None where calls' rows are not episodes."""
    single_turn = getattr(env, "max_turns", 1) == 1 and not hasattr(env, "run_groups") and not hasattr(env, "evaluate_games")
    return tasks * (1 + samples) if single_turn else None


class EvalCounter:
    """`engine` for `evaluate`, calling `advanced(done)` with the rows finished so far."""

    def __init__(self, engine: Any, advanced: Callable[[int], None]):
        self._engine, self._advanced, self.done = engine, advanced, 0

    def __getattr__(self, name: str) -> Any:  # everything but generate is the engine's own
        return getattr(self._engine, name)

    def generate(self, prompts: list[list[int]], params: Any, seed: int | None = None, **kwargs: Any) -> list:
        before = self.done
        watch = (type(self._engine) is TorchEngine and "stop_when" not in kwargs and "decode_hook" not in kwargs
                 and len(prompts) <= self._engine.max_batch_size)  # its stop_when needs one batch

        def finished(rows: torch.Tensor) -> bool:
            self._set(before + int(rows.sum()))
            return False  # never stops: the call samples exactly what it would without the hook

        if watch:
            kwargs["stop_when"] = finished
        generations = self._engine.generate(prompts, params, seed=seed, **kwargs)
        self._set(before + len(prompts))
        return generations

    def _set(self, done: int) -> None:
        if done != self.done:
            self.done = done
            self._advanced(done)
