"""The same loop pointed at other models and data: a local HF directory, JSONL, reasoning-gym.

These check the wiring end to end with the smallest settings (they do not test learning; the
end-to-end learning test does).
"""

from __future__ import annotations

import json

from transformers import AutoModelForCausalLM

from reinforge.cli import main
from reinforge.models.loading import save_model

TINY_RUN = [
    "model.preset=nano",
    "task.train_size=64",
    "task.eval_size=8",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "trainer.steps=2",
    "eval.samples=1",
    "telemetry.progress=false",
    "telemetry.tensorboard=false",
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_train_on_a_local_model_directory_and_jsonl_tasks(tmp_path, tokenizer, nano_model):
    model_dir = save_model(nano_model, tokenizer, tmp_path / "my_model")
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "verifier": "numeric"} for i in range(20)]
    write_jsonl(tmp_path / "train.jsonl", rows)
    run = tmp_path / "run"
    code = main(
        ["train", "--model", str(model_dir), "--output", str(run), "task.source=jsonl",
         f"task.path={tmp_path / 'train.jsonl'}", *TINY_RUN]
    )
    assert code == 0
    assert not (run / "warm_start").exists()  # --model skips the recipe's warm-up
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if m["stage"] == "rl"] == [1, 2]
    assert AutoModelForCausalLM.from_pretrained(run / "final").config.vocab_size == nano_model.config.vocab_size


def test_train_on_a_reasoning_gym_dataset(tmp_path):
    run = tmp_path / "run"
    code = main(
        ["train", "--output", str(run), "task.source=reasoning_gym", "task.dataset=leg_counting",
         # 10 tokens: the longest demonstration, <answer>NN</answer> and the end token, must fit one turn
         "rollout.max_new_tokens=10", "model.max_positions=512", "sft.steps=2", *TINY_RUN]
    )
    assert code == 0
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert "legs" in sample["prompt"] and set(sample["rewards"]) == {"correct", "format"}


def test_sft_command_saves_a_warm_start(tmp_path):
    run = tmp_path / "run"
    assert main(["sft", "--output", str(run), "sft.steps=2", *TINY_RUN]) == 0
    assert (run / "warm_start" / "config.json").is_file()
