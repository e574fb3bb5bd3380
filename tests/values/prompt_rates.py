"""A reward whose pass rate depends on the prompt, for runs of the untrained nano model (whose
samples are close to uniform): a sample passes when its sampled token ids sum, mod 4, below the
task's answer mod 4. Prompts with answers 0 mod 4 are hopeless (all-equal groups dynamic sampling
drops), the others pass a quarter to three quarters of the time: something for a curriculum to
tell apart, by the import path `tests.values.prompt_rates:by_answer`."""

from __future__ import annotations


def by_answer(task, trajectory) -> float:
    sampled = trajectory.token_ids[trajectory.prompt_length :]
    return float(sum(sampled) % 4 < int(task.answer) % 4)
