"""A recipe's prompt settings, applied to every task of every source in one place (tasks.registry).

`task.instruction` is added to each task's question (a text prompt, or the last user message of a
chat prompt): after a blank line, or in place of `{question}` when the instruction holds one.
Unset, the source's own instruction applies (a source module's `DEFAULT_INSTRUCTION`, e.g.
reasoning-gym's "answer inside <answer></answer> tags"); an empty string means none. Sources
therefore write bare questions and leave instructions to this module.

`task.system_prompt` makes the prompt a chat conversation whose first message is that system
message (replacing a system message the task data brought). Unset, no system message is added and
the chat template's own default (if it has one) applies. A raw-text prompt cannot hold it: the env
refuses (envs.single_turn) before any model is loaded.

`task.answer_extractor` is stamped on every task (`Task.answer_extractor`), where the verifiers,
in whatever process they run, read it.
"""

from __future__ import annotations

import dataclasses

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.task import Prompt, Task, TaskSplits

QUESTION = "{question}"
# Sources whose tasks are not prompts a model reads: their envs write the prompts.
NO_PROMPT_SOURCES = ("game", "text_game")
PROMPT_KEYS = ("system_prompt", "instruction")


def check_prompt_settings(cfg: TaskConfig) -> None:
    """Before compute: prompt settings on a source that has no prompts, a placeholder used twice."""
    if cfg.source in NO_PROMPT_SOURCES:
        for key in PROMPT_KEYS:
            if getattr(cfg, key) is not None:
                raise ConfigError(
                    f"task.{key} applies to sources whose tasks are prompts (arithmetic, reasoning_gym, jsonl, hf_dataset, "
                    f"your own); source={cfg.source}'s env writes its own prompts: remove task.{key}"
                )
    if cfg.instruction is not None and cfg.instruction.count(QUESTION) > 1:
        raise ConfigError(f"task.instruction holds {QUESTION} {cfg.instruction.count(QUESTION)} times; use it once (or not at all)")


def with_instruction(question: str, instruction: str | None) -> str:
    """The question with the instruction after a blank line, or in place of `{question}`."""
    if not instruction:
        return question
    if QUESTION in instruction:
        return instruction.replace(QUESTION, question)
    return f"{question}\n\n{instruction}"


def instructed(prompt: Prompt, instruction: str | None, task_id: str) -> Prompt:
    """`prompt` with the instruction added to its question (a chat prompt's last user message)."""
    if not instruction:
        return prompt
    if isinstance(prompt, str):
        return with_instruction(prompt, instruction)
    last_user = max((i for i, m in enumerate(prompt) if m.get("role") == "user"), default=None)
    if last_user is None:
        raise ConfigError(f"task {task_id}: task.instruction is added to the question, but this chat prompt has no user message")
    messages = [dict(m) for m in prompt]
    messages[last_user]["content"] = with_instruction(str(messages[last_user].get("content") or ""), instruction)
    return messages


def with_system_prompt(prompt: Prompt, system_prompt: str | None) -> Prompt:
    """`prompt` as chat messages led by the system message; unchanged when there is none."""
    if system_prompt is None:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    rest = [m for i, m in enumerate(messages) if not (i == 0 and m.get("role") == "system")]
    return [{"role": "system", "content": system_prompt}, *rest]


def apply_prompt_settings(splits: TaskSplits, cfg: TaskConfig, instruction: str | None) -> TaskSplits:
    """Every task with `instruction` (the recipe's, else the source's: tasks.registry), the recipe's
    system prompt and answer extractor."""

    def apply(task: Task) -> Task:
        prompt = with_system_prompt(instructed(task.prompt, instruction, task.id), cfg.system_prompt)
        extractor = cfg.answer_extractor or task.answer_extractor
        if prompt is task.prompt and extractor == task.answer_extractor:
            return task
        return dataclasses.replace(task, prompt=prompt, answer_extractor=extractor)

    return TaskSplits(train=[apply(t) for t in splits.train], eval=[apply(t) for t in splits.eval])
