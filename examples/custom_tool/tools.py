"""A tool of our own: any function with type hints and a Google-style docstring.

Named in the recipe as `env.tools: ["./tools.py:count_vowels"]`. reinforge reads the tool's name,
description and parameters from the signature and the docstring (the schema the chat template
shows the model), and the built-in tool env runs it when the policy writes
`<<count_vowels: banana>>` (env.tool_format: compact) and hands its result back as a tool message.
It runs in the trainer's process, under the env's tool timeout: keep it quick and side-effect free.
"""

from __future__ import annotations


def count_vowels(word: str) -> int:
    """Count the vowels (a, e, i, o, u) in a word.

    Args:
        word: the word to look at
    """
    return sum(letter in "aeiou" for letter in word.lower())
