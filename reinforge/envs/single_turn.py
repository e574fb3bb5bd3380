"""The single-turn environment: a task's prompt in, one policy response, then the episode ends."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from reinforge.envs.base import StepResult
from reinforge.envs.chat_format import ChatFormat
from reinforge.tasks.task import Task


class PromptFormatError(ValueError):
    pass


NO_TEMPLATE = (
    "rollout.prompt_format=chat but the tokenizer has no chat template (no 'chat_template' in its tokenizer_config.json or "
    "chat_template.jinja): use rollout.prompt_format=raw (a base model's completion prompts), or give the tokenizer the "
    "template its model was trained with (tokenizer.chat_template = '...'; tokenizer.save_pretrained(DIR))"
)


def chat_messages(task: Task) -> list[dict]:
    return task.prompt if isinstance(task.prompt, list) else [{"role": "user", "content": task.prompt}]


class SingleTurnEnv:
    """Turns a Task into prompt token ids, once, with the tokenizer's chat template or as raw text.

    `prompt_format`: "raw" encodes text prompts as they are (with the tokenizer's own special
    tokens, e.g. <bos>) and a response ends with end-of-sequence; "chat" applies the chat template
    with a generation prompt and a response ends with the template's end-of-turn token; "auto"
    picks "chat" when the tokenizer has a template.
    """

    max_turns = 1

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_format: str = "auto"):
        self.tokenizer = tokenizer
        self.requested_format = prompt_format
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if prompt_format == "auto":
            prompt_format = "chat" if has_template else "raw"
        if prompt_format == "chat" and not has_template:
            raise PromptFormatError(NO_TEMPLATE)
        self.prompt_format = prompt_format
        self.chat = ChatFormat(tokenizer) if prompt_format == "chat" else None
        end = self.chat.end_of_turn_id if self.chat is not None else tokenizer.eos_token_id
        self.end_of_response_id = end
        self.stop_token_ids = tuple(dict.fromkeys([end, tokenizer.eos_token_id]))

    def prompt_ids(self, task: Task) -> list[int]:
        if self.chat is not None:
            return self.chat.prompt_ids(chat_messages(task))
        if isinstance(task.prompt, list):
            raise PromptFormatError(
                f"task {task.id} has a chat prompt (chat messages in its data, or a system message from task.system_prompt) but "
                f"rollout.prompt_format={self.requested_format} renders prompts as raw text"
                + (" because the tokenizer has no chat template" if self.requested_format == "auto" else "")
                + ": use a tokenizer with a chat template and rollout.prompt_format=chat or auto, or remove task.system_prompt"
            )
        return self.tokenizer(task.prompt).input_ids

    def response_ids(self, text: str) -> list[int]:
        """A target completion for supervised warm-up: the text, then the end of the response."""
        return self.tokenizer(text, add_special_tokens=False).input_ids + [self.end_of_response_id]

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        if not isinstance(task.sft_target, str):
            raise PromptFormatError(f"task {task.id}: a multi-turn demonstration needs a multi-turn env (env.type=tool)")
        prompt, response = self.prompt_ids(task), self.response_ids(task.sft_target)
        return prompt + response, [False] * len(prompt) + [True] * len(response)

    def demonstration_turns(self, task: Task) -> list[str]:
        """The text of the response that warm-up teaches (each turn is closed by one end token)."""
        target = task.sft_target
        return [target] if isinstance(target, str) else [str(m.get("content") or "") for m in target if m.get("role") == "assistant"]

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def episode(self) -> "SingleTurnEpisode":
        return SingleTurnEpisode(self)


class SingleTurnEpisode:
    """Stateless apart from the env: the first policy turn ends the episode."""

    def __init__(self, env: SingleTurnEnv):
        self.env = env

    def reset(self, task: Task) -> list[int]:
        return self.env.prompt_ids(task)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        return StepResult(done=True, info={"finish_reason": finish_reason})
