"""What `reinforge eval` asked the model and how it read the answers: the prompt settings, the
first prompt as the model reads it, and greedy answers split into correct / wrong / no answer.

A base model that never writes the answer in the form the extractor looks for scores 0 for a
reason RL cannot fix by being right more often: counting "no answer found" apart from "wrong
answer" says which of the two a low accuracy is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reinforge.config import Config
from reinforge.tasks.registry import source_instruction
from reinforge.tasks.task import Task


def prompt_settings(cfg: Config, env: Any, tasks: Sequence[Task]) -> dict[str, Any]:
    """The prompt format in effect, system prompt, instruction (the recipe's or the source's),
    answer extractor(s), and the first held-out prompt decoded from its token ids (template included)."""
    instruction = source_instruction(cfg.task)
    first = env.tokenizer.decode(env.prompt_ids(tasks[0])) if tasks and hasattr(env, "prompt_ids") else None
    return {
        "prompt_format": getattr(env, "prompt_format", cfg.rollout.prompt_format),
        "system_prompt": cfg.task.system_prompt,
        "instruction": instruction,
        "instruction_from": "task.instruction" if cfg.task.instruction is not None else f"source {cfg.task.source}'s default",
        "answer_extractor": ", ".join(sorted({t.answer_extractor for t in tasks})),
        "first_prompt": first,
    }


def prompt_lines(settings: Mapping[str, Any]) -> list[str]:
    """The settings in a few lines for the terminal and eval.md."""
    system = settings["system_prompt"]
    return [
        f"prompt format: {settings['prompt_format']}",
        "system prompt: " + ("none (the chat template's default, if any)" if system is None else repr(system)),
        f"instruction ({settings['instruction_from']}): " + (repr(settings["instruction"]) if settings["instruction"] else "none"),
        f"answer extractor: {settings['answer_extractor']}",
    ]


def answer_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """Greedy responses: correct, wrong (an answer was found and is wrong) and no_answer (the
    extractor found none); None for records without extraction (games)."""
    if not records or any("extracted" not in r for r in records):
        return None
    correct = sum(bool(r["correct"]) for r in records)
    no_answer = sum(not r["correct"] and r["extracted"] is None for r in records)
    return {"correct": correct, "wrong": len(records) - correct - no_answer, "no_answer": no_answer}


def counts_line(counts: Mapping[str, int]) -> str:
    total = sum(counts.values())
    return (
        f"greedy answers: {counts['correct']} correct, {counts['wrong']} wrong, {counts['no_answer']} with no answer "
        f"found by the extractor (of {total})"
    )
