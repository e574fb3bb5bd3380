"""Tasks for the vowel-counting agent: one word per task, from words.txt shipped next to this file.

Named in the recipe as `task.source: "./vowel_tasks.py:load"`. Each task's demonstration is a
tool-using conversation in Hugging Face chat format, which the warm-up imitates:

    assistant: (no text) + tool_calls [{"type": "function", "function": {"name": "count_vowels",
               "arguments": {"word": "banana"}}}]
    tool:      "3"
    assistant: "3"

The tool env writes the call in its own syntax (`<<count_vowels: banana>>` for tool_format
compact), so one demonstration serves every format. `task.params.tool_traces` (default 1.0) is the
fraction of demonstrations that call the tool; the others state the answer directly.
"""

from __future__ import annotations

import random
from pathlib import Path

from reinforge.tasks.task import Task

WORDS = Path(__file__).with_name("words.txt")


def vowels(word: str) -> int:
    # The answer key, computed here rather than by calling the tool: the reference must not
    # depend on the code under test.
    return sum(letter in "aeiou" for letter in word)


def demonstration(word: str, with_tool: bool) -> list[dict] | str:
    answer = str(vowels(word))
    if not with_tool:
        return answer
    call = {"type": "function", "function": {"name": "count_vowels", "arguments": {"word": word}}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": answer},
    ]


def load(cfg, seed: int) -> list[Task]:
    unknown = set(cfg.params) - {"tool_traces"}
    if unknown:
        raise ValueError(f"task.params: unknown keys {sorted(unknown)}; vowel_tasks takes tool_traces")
    tool_traces = cfg.params.get("tool_traces", 1.0)
    if not 0.0 <= tool_traces <= 1.0:
        raise ValueError(f"task.params.tool_traces is a fraction in [0, 1], got {tool_traces!r}")
    words = [w.strip().lower() for w in WORDS.read_text().splitlines() if w.strip() and not w.startswith("#")]
    rng = random.Random(seed)
    return [
        Task(id=f"vowels-{word}", prompt=f"How many vowels are in {word}?", answer=str(vowels(word)),
             verifier="numeric", demonstration=demonstration(word, rng.random() < tool_traces))
        for word in words
    ]
