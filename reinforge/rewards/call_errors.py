"""Why a reward call failed: the three reasons the scorer counts and reports separately.

- `timeout`: the call ran past `reward.timeout_s` and was stopped (its worker process killed);
- `raised`: the reward function raised (or its input or result could not cross to or from the
  worker process);
- `worker_died`: the process running the call died under it (a crash in native code, the OOM
  killer, a reward that calls `os._exit`).
"""

from __future__ import annotations

FAILURE_REASONS: tuple[str, ...] = ("timeout", "raised", "worker_died")


class RewardCallError(RuntimeError):
    """A reward call that gave no score; `reason` is one of FAILURE_REASONS."""

    reason = "raised"

    def __init__(self, message: str, traceback_text: str | None = None):
        super().__init__(message)
        self.traceback_text = traceback_text or message


class RewardTimeout(RewardCallError):
    reason = "timeout"


class RewardRaised(RewardCallError):
    reason = "raised"


class RewardWorkerDied(RewardCallError):
    reason = "worker_died"


def failure_reason(err: BaseException) -> str:
    """The counted reason of any exception a reward call ended with (a plain exception raised by a
    reward function run in-process is `raised`)."""
    return err.reason if isinstance(err, RewardCallError) else "raised"
