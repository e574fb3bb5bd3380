"""A reward of our own: partial credit for an answer numerically close to the reference.

Named in the recipe as `reward.components[].fn: "./closeness.py:close_to_answer"`, with the
component's `params` passed as keywords. reinforge calls it with the task and the trajectory
(`trajectory.response_text` is the policy's decoded answer), in a worker process that a timeout
can stop; a raise or a non-number is counted against this component, never scored as 0.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+")


def close_to_answer(task, trajectory, scale: float = 10.0) -> float:
    """max(0, 1 - |guess - answer| / scale): 1 for the exact answer, falling linearly to 0 at
    `scale` away; 0 when the response holds no number."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    found = NUMBER.search(trajectory.response_text)
    if found is None:
        return 0.0
    return max(0.0, 1.0 - abs(int(found.group()) - int(task.answer)) / scale)
