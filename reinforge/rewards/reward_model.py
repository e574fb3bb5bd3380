"""A learned reward model: any local Hugging Face sequence-classification checkpoint as a RewardFn.

The model reads prompt + response as one text and its single output logit is the reward
(a Bradley-Terry reward model, as in Ouyang et al., "Training language models to follow
instructions with human feedback", 2022). Text is truncated from the left so the end of the
response, where the score is read, is always kept. A special token the policy writes inside its
response (`<|im_start|>user ...`) is read as text, not as a turn marker: the response cannot forge
a turn of the conversation the reward model scores (reinforge.envs.control_tokens).
"""

from __future__ import annotations


import threading

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from reinforge.envs.control_tokens import ControlTokens, text_tokenizer
from reinforge.models.loading import ModelLoadError, check_model_dir
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class RewardModelReward:
    """Scores (task, trajectory) with a local sequence-classification model (num_labels=1)."""

    in_process = True  # scored in the trainer's process: one copy of the weights, not one per reward worker

    def __init__(self, path: str, batch_size: int = 32, max_length: int = 512):
        # Checked now from config.json alone (cheap, so config validation stays model-free);
        # the weights are loaded on first use.
        self.directory = check_model_dir(path, what="reward model")
        if batch_size < 1 or max_length < 1:
            raise ValueError(f"reward model needs batch_size >= 1 and max_length >= 1, got {batch_size}, {max_length}")
        num_labels = AutoConfig.from_pretrained(self.directory, local_files_only=True).num_labels
        if num_labels != 1:
            raise ModelLoadError(
                f"reward model {self.directory} has num_labels={num_labels}; a scalar reward model needs num_labels=1"
            )
        self.batch_size = batch_size
        self.max_length = max_length
        self._loaded = False
        self._load_lock = threading.Lock()

    def _load(self) -> None:
        with self._load_lock:  # reward calls run on several threads
            if self._loaded:
                return
            self.tokenizer = AutoTokenizer.from_pretrained(self.directory, local_files_only=True)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                self.directory, local_files_only=True, dtype="float32"
            ).eval()
            if self.tokenizer.pad_token_id is None:
                self.tokenizer.pad_token = self.tokenizer.eos_token
            # The classifier reads the last non-pad token, found through config.pad_token_id.
            if self.model.config.pad_token_id is None:
                self.model.config.pad_token_id = self.tokenizer.pad_token_id
            self.tokenizer.truncation_side = "left"
            self._chat = getattr(self.tokenizer, "chat_template", None) is not None
            self._controls = ControlTokens(self.tokenizer)
            self._loaded = True

    def _ids(self, task: Task, trajectory: Trajectory) -> list[int]:
        """The scored text's token ids, its inputs' special tokens as text, cut from the left."""
        if self._chat and not isinstance(task.prompt, str):
            messages = self._controls.mark([*task.prompt, {"role": "assistant", "content": trajectory.response_text}])
            ids = self._controls.encode(self.tokenizer.apply_chat_template(messages, tokenize=False))
        else:  # plain text: every special token in it came from the inputs; the tokenizer adds its own (BOS)
            prompt = task.prompt if isinstance(task.prompt, str) else "\n".join(m["content"] for m in task.prompt) + "\n"
            ids = text_tokenizer(self.tokenizer)(prompt + trajectory.response_text).input_ids
        return ids[-self.max_length:]

    @torch.no_grad()
    def score_batch(self, tasks: list[Task], trajectories: list[Trajectory]) -> list[float]:
        if len(tasks) != len(trajectories):
            raise ValueError(f"score_batch: {len(tasks)} tasks but {len(trajectories)} trajectories")
        self._load()
        rows = [self._ids(task, trajectory) for task, trajectory in zip(tasks, trajectories)]
        scores: list[float] = []
        for start in range(0, len(rows), self.batch_size):
            batch = self.tokenizer.pad({"input_ids": rows[start : start + self.batch_size]}, return_tensors="pt")
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            scores.extend(logits[:, 0].float().tolist())
        return scores

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        return self.score_batch([task], [trajectory])[0]
