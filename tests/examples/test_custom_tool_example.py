"""examples/custom_tool: the user's own tool function ('./tools.py:count_vowels') in the built-in
tool env, with a task source whose demonstrations call it, run as a user runs it. A short warm-up
and two RL steps (plumbing only): the policy calls the tool in its rollouts, the calls are valid
and counted in metrics.jsonl, and what comes back is the user's function's result."""

from __future__ import annotations

import re

from example_runs import read_jsonl, run_example

FAST = [
    "sft.steps=80", "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.steps=2", "trainer.sample_every=1",
    "eval.every=2", "eval.samples=1", "task.eval_size=8",
]
CALL = re.compile(r"<<count_vowels:\s*(.*?)>>")


def test_custom_tool_is_called_during_rollouts(tmp_path):
    run_dir, _ = run_example("custom_tool", tmp_path, *FAST)

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["stage"] == "rl"]
    assert len(steps) == 2
    for step in steps:
        assert step["tool_calls_per_episode"] > 0 and step["tool_call_rate"] > 0
        assert step["valid_call_rate"] > 0  # calls that parsed, named count_vowels and ran

    # The tool's answers in the episodes are count_vowels' own: the vowels of the word it was called with.
    answered = 0
    for sample in read_jsonl(run_dir / "samples.jsonl"):
        turns = sample.get("turns", [])
        for call_turn, reply in zip(turns, turns[1:]):
            call = CALL.fullmatch(call_turn["text"].strip())
            if call_turn["role"] == "policy" and reply["role"] == "tool" and call is not None:
                assert reply["text"] == str(sum(c in "aeiou" for c in call.group(1).strip().lower())), (call_turn, reply)
                answered += 1
    assert answered > 0
