"""Why a reward call failed: the three reasons the scorer counts and reports separately.

- `timeout`: the call ran past `reward.timeout_s` and was stopped (its worker process killed);
- `raised`: the reward function raised (or its input or result could not cross to or from the
  worker process);
- `worker_died`: the process running the call died under it (a crash in native code, the OOM
  killer, a reward that calls `os._exit`);
- `not_a_number`: the reward returned something that is not a finite number (None, a string,
  nan, inf): training on it would either crash later or silently spread nan through the
  advantages, so it is a failure like the others.
"""

from __future__ import annotations

FAILURE_REASONS: tuple[str, ...] = ("timeout", "raised", "worker_died", "not_a_number")


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


class RewardNotANumber(RewardCallError):
    reason = "not_a_number"


# By class name: how a worker process's failure crosses back with its reason.
CALL_ERRORS: dict[str, type[RewardCallError]] = {
    cls.__name__: cls for cls in (RewardTimeout, RewardRaised, RewardWorkerDied, RewardNotANumber)
}


def failure_reason(err: BaseException) -> str:
    """The counted reason of any exception a reward call ended with (a plain exception raised by a
    reward function run in-process is `raised`)."""
    return err.reason if isinstance(err, RewardCallError) else "raised"


class RewardWorkerStartError(RuntimeError):
    """A reward worker (a process, or a Ray actor) that cannot build a reward component the trainer
    built: typically a user's module that does not import there. Raised when the workers start, so
    a run stops before training with this message (the trainer prefixes the config key)."""

    def __init__(self, component: str, message: str):
        super().__init__(message)
        self.component = component
