"""A partial-rollout stop rule for an engine that does not sample its rows in lock-step (vLLM).

TorchEngine samples every live row one token per step and asks the stop rule `stop_when(finished)`
at each step where a row finishes (stop token or budget); when it fires at step t, every row still
running comes back with its t tokens, finish reason "aborted". vLLM schedules rows on its own
(continuous batching, chunked prefill), so at a given moment its rows hold different numbers of
tokens. `LockstepStop` replays the lock-step rule over what the engine has produced so far: the
virtual step t is the fewest tokens any running row holds (every row has passed step t, so whether
it had finished by then is known), the rule is asked at each step up to t where a row finished,
exactly as TorchEngine asks it, and once it fires at step t the engine aborts its running rows and
`cut` trims every row longer than t back to t tokens ("aborted"). So which rows finish and where
the others are cut depends on each row's own tokens only, never on the engine's scheduling: the
same rows as TorchEngine's would be, given the same tokens. The tokens rows sampled past t are
wasted work, bounded by how far the scheduler let rows run ahead of each other.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class LockstepStop:
    """Feed it each row's token count and finished flag after every engine step (`update`)."""

    def __init__(self, rule: Callable[[torch.Tensor], bool], rows: int):
        self.rule, self.rows = rule, rows
        self.asked = 0  # virtual steps already replayed
        self.step: int | None = None  # where the rule fired, once it has

    def update(self, lengths: list[int], finished: list[bool]) -> int | None:
        """Replay the steps every row has now passed; the step the rule fires at, or None."""
        if self.step is not None:
            return self.step
        running = [n for n, done in zip(lengths, finished) if not done]
        horizon = min(running) if running else max(lengths, default=0)
        ends = {n for n, done in zip(lengths, finished) if done and self.asked < n <= horizon}
        for step in sorted(ends):  # the steps at which TorchEngine would ask the rule
            done_by = torch.tensor([done and n <= step for n, done in zip(lengths, finished)], dtype=torch.bool)
            if self.rule(done_by):
                self.step = step
                return step
        self.asked = horizon
        return None

    def cut(self, length: int, finished: bool) -> tuple[int, bool]:
        """A row's (tokens kept, aborted) once sampling stopped: rows past the rule's step go back to it."""
        if self.step is not None and length > self.step:
            return self.step, True
        return length, not finished
