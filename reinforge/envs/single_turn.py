"""The single-turn environment: a task's prompt in, one policy response, then the episode ends."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from reinforge.tasks.task import Task


class PromptFormatError(ValueError):
    pass


class SingleTurnEnv:
    """Turns a Task into prompt token ids, once, with the tokenizer's chat template or as raw text.

    `prompt_format`: "raw" encodes text prompts as they are (with the tokenizer's own special
    tokens, e.g. <bos>); "chat" applies the chat template with a generation prompt; "auto" picks
    "chat" when the tokenizer has a template.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_format: str = "auto"):
        self.tokenizer = tokenizer
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if prompt_format == "auto":
            prompt_format = "chat" if has_template else "raw"
        if prompt_format == "chat" and not has_template:
            raise PromptFormatError("rollout.prompt_format=chat but the tokenizer has no chat template; use raw")
        self.prompt_format = prompt_format

    def prompt_ids(self, task: Task) -> list[int]:
        if self.prompt_format == "chat":
            messages = task.prompt if isinstance(task.prompt, list) else [{"role": "user", "content": task.prompt}]
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        if isinstance(task.prompt, list):
            raise PromptFormatError(
                f"task {task.id} has a chat prompt but rollout.prompt_format=raw; use chat with a tokenizer that has a chat template"
            )
        return self.tokenizer(task.prompt).input_ids

    def response_ids(self, text: str) -> list[int]:
        """A target completion for supervised warm-up: the text, then the end-of-sequence token."""
        return self.tokenizer(text, add_special_tokens=False).input_ids + [self.tokenizer.eos_token_id]

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)
