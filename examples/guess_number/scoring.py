"""The reward of guess-the-number: 1 for finding the secret, less for each extra guess.

Named in the recipe as `reward.components[].fn: "./scoring.py:found_quickly"`; `params` of the
component are passed as keywords. reinforge calls it with the task and the finished episode's
trajectory: `trajectory.response_text` is the policy's last turn (its final guess) and
`trajectory.num_turns` the number of guesses it made.
"""

from __future__ import annotations


def found_quickly(task, trajectory, cost_per_guess: float = 0.05) -> float:
    """1 - cost_per_guess * (guesses - 1) when the last guess is the secret, else 0."""
    found = trajectory.response_text.strip() == task.answer
    return max(0.0, 1.0 - cost_per_guess * (trajectory.num_turns - 1)) if found else 0.0
