"""Training on a user's own data files, through the real pipeline (`reinforge train`), smallest
settings: a GSM8K-style Parquet file, and a JSONL of tool-call conversations for a tool env's
warm-up. Wiring, not learning: the end-to-end learning tests measure learning."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from reinforge.cli import main
from reinforge.run import pipeline

TINY_RUN = [
    "model.preset=nano",
    "sft.steps=3",
    "sft.batch_size=4",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "trainer.steps=2",
    "eval.samples=1",
    "telemetry.progress=false",
    "telemetry.tensorboard=false",
]


def spy_on_warm_up(monkeypatch) -> list:
    """(env, tasks) of every warm-up the pipeline runs."""
    calls = []
    original = pipeline.run_sft

    def spy(model, env, tasks, *rest, **kwargs):
        calls.append((env, list(tasks)))
        return original(model, env, tasks, *rest, **kwargs)

    monkeypatch.setattr(pipeline, "run_sft", spy)
    return calls


def test_train_on_a_gsm8k_style_parquet_file(tmp_path, monkeypatch):
    rows = [{"question": f"What is {a}+{a + 1}?", "answer": f"{a}+{a + 1} = {2 * a + 1}\n#### {2 * a + 1}"} for a in range(24)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "gsm8k.parquet")
    warm_ups = spy_on_warm_up(monkeypatch)
    run = tmp_path / "run"
    code = main(
        ["train", "--output", str(run), "task.source=hf_dataset", f"task.path={tmp_path / 'gsm8k.parquet'}", "task.prompt_field=question",
         "task.answer_format=gsm8k", "task.eval_size=4", "rollout.max_new_tokens=24", *TINY_RUN]
    )
    assert code == 0

    (env, tasks), = warm_ups
    assert len(tasks) == 20 and all(t.verifier == "numeric" for t in tasks)
    # the warm-up teaches the worked solution, its final answer in the form the verifier reads
    for task in tasks:
        a = int(task.prompt.removeprefix("What is ").split("+")[0])
        assert (task.answer, task.demonstration) == (str(2 * a + 1), f"{a}+{a + 1} = {2 * a + 1}\n<answer>{2 * a + 1}</answer>")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if m["stage"] == "rl"] == [1, 2]
    assert [m for m in metrics if m["stage"] == "eval"]
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"].startswith("What is") and "correct" in sample["rewards"]


def test_a_tool_envs_warm_up_from_a_jsonl_of_tool_call_conversations(tmp_path, monkeypatch):
    def conversation(a: int, b: int) -> list[dict]:
        call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}}
        return [
            {"role": "user", "content": f"{a}*{b}="},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": str(a * b)},
        ]

    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps({"messages": conversation(a, 10 + a)}) + "\n" for a in range(100, 124)))
    warm_ups = spy_on_warm_up(monkeypatch)
    run = tmp_path / "run"
    code = main(
        ["train", "--output", str(run), "task.source=hf_dataset", f"task.path={path}", "task.messages_field=messages",
         "task.verifier=numeric", "task.eval_size=4", "env.type=tool", "env.tools=[calculator]", "rollout.prompt_format=chat",
         "rollout.max_new_tokens=24",
         "model.max_positions=256", *TINY_RUN]
    )
    assert code == 0

    (env, tasks), = warm_ups
    task = tasks[0]
    a, b = (int(x) for x in task.prompt[0]["content"].rstrip("=").split("*"))
    ids, trained = env.sft_example(task)
    # exactly the tokens of an episode in which the policy writes the call and the real tool answers
    episode = env.episode()
    prompt = episode.reset(task)
    written = f"<<calculator: {a}*{b}>>"
    step = episode.step(written, "stop")
    assert step.observation_text == str(a * b)
    call_turn = env.tokenizer(written, add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    answer_turn = env.tokenizer(str(a * b), add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    assert ids == prompt + call_turn + step.observation_ids + answer_turn
    assert trained == [False] * len(prompt) + [True] * len(call_turn) + [False] * len(step.observation_ids) + [True] * len(answer_turn)
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("tool_call_rate" in s for s in steps if s["stage"] == "rl")
