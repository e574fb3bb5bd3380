"""The multi-turn rollout: tokens in, tokens out, over turns; limits; and the log-prob invariant."""

from __future__ import annotations

import torch

from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.base import StepResult
from reinforge.envs.tool_env import ToolEnv
from reinforge.envs.tools.builtin import build_tools
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import compute_logprobs
from reinforge.rollout.episode_metrics import episode_metrics
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from float_bounds import logit_bound

TASKS = [Task(id="a", prompt="12*34=", answer="408", verifier="numeric"), Task(id="b", prompt="7*8=", answer="56", verifier="numeric")]


class TextEngine:
    """Answers each prompt with scripted text (by call number and row), closed by the stop token."""

    policy_version = 3

    def __init__(self, tokenizer, script, stop_id):
        self.tokenizer, self.script, self.stop_id, self.calls = tokenizer, script, stop_id, []

    def generate(self, prompts, params, seed=None):
        self.calls.append((prompts, seed))
        out = []
        for row, _ in enumerate(prompts):
            ids = self.tokenizer(self.script(len(self.calls) - 1, row), add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.1 * (i + 1) for i in range(len(ids))], "stop", self.policy_version))
        return out

    def sync_weights(self, version):
        pass


def tool_env(tokenizer, **kwargs) -> ToolEnv:
    return ToolEnv(tokenizer, build_tools(["calculator"]), "compact", **kwargs)


def test_tool_episode_tokens_mask_spans_and_transcript(tokenizer) -> None:
    env = tool_env(tokenizer)
    # turn 0: every episode calls the calculator; turn 1: row 0 answers, row 1 calls an unknown
    # tool (and answers on turn 2, as the only live episode), the others answer
    def script(call, row):
        if call == 0:
            return "<<calculator: 12*34>>" if row < 2 else "<<calculator: 7*8>>"
        if call == 2:
            return "408"
        return "408" if row == 0 else ("<<nope: 1>>" if row == 1 else "56")

    engine = TextEngine(tokenizer, script, env.chat.end_of_turn_id)
    out = rollout_groups(engine, env, TASKS, 2, SamplingParams(8, stop_token_ids=env.stop_token_ids), seed=5)
    assert [c[1] for c in engine.calls] == [5, 5 * 1_000_033 + 1, 5 * 1_000_033 + 2]  # turn seeds
    assert len(engine.calls[1][0]) == 4 and len(engine.calls[2][0]) == 1  # only live episodes go on

    first = out[0]
    prompt = env.prompt_ids(TASKS[0])
    call = tokenizer("<<calculator: 12*34>>", add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    obs = env.chat.observation_ids([{"role": "tool", "content": "408"}])
    answer = tokenizer("408", add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]
    assert first.token_ids == prompt + call + obs + answer  # exactly what was sampled and appended
    assert first.loss_mask == [False] * len(prompt) + [True] * len(call) + [False] * len(obs) + [True] * len(answer)
    sampled_logprobs = [lp for lp, m in zip(first.behaviour_logprobs, first.loss_mask) if m]
    assert sampled_logprobs == [-0.1 * (i + 1) for i in range(len(call))] + [-0.1 * (i + 1) for i in range(len(answer))]
    assert first.turn_spans == [(len(prompt), len(prompt) + len(call)), (len(prompt) + len(call) + len(obs), len(first.token_ids))]
    assert first.response_text == "408" and first.finish_reason == "stop" and first.policy_version == 3
    assert first.stats == {"tool_calls": 1, "valid_calls": 1, "tool_errors": 0, "void_turns": 0}
    assert [t["role"] for t in first.transcript] == ["policy", "tool", "policy"]

    broken = out[1]  # called an unknown tool on turn 1, then answered on turn 2
    assert broken.stats["tool_calls"] == 2 and broken.stats["tool_errors"] == 1 and broken.num_turns == 3
    assert "nope" in broken.transcript[3]["text"] and broken.response_text == "408"

    metrics = episode_metrics(out)
    assert metrics["tool_call_rate"] == 1.0
    assert metrics["valid_call_rate"] == (1 + 1 + 1 + 1) / (1 + 2 + 1 + 1)
    assert metrics["turns"] == (2 + 3 + 2 + 2) / 4


def test_limits_end_episodes_with_a_finish_reason_and_keep_only_sampled_tokens(tokenizer) -> None:
    env = tool_env(tokenizer, max_turns=2)
    engine = TextEngine(tokenizer, lambda call, row: "<<calculator: 1+1>>", env.chat.end_of_turn_id)
    params = SamplingParams(12, stop_token_ids=env.stop_token_ids)
    capped = rollout_groups(engine, env, TASKS[:1], 1, params, seed=0)[0]
    assert capped.finish_reason == "max_turns" and capped.num_turns == 2
    assert capped.token_ids[-1] == env.chat.end_of_turn_id  # no observation after the last allowed turn

    prompt_len = len(env.prompt_ids(TASKS[0]))
    budget = prompt_len + 5
    cut = rollout_groups(engine, tool_env(tokenizer), TASKS[:1], 1, params, seed=0, max_episode_tokens=budget)[0]
    assert cut.finish_reason == "max_tokens" and len(cut.token_ids) == budget
    assert cut.token_ids[prompt_len:] == tokenizer("<<calculator: 1+1>>", add_special_tokens=False).input_ids[:5]
    assert sum(cut.loss_mask) == 5


def test_an_env_that_raises_ends_only_its_episode(tokenizer) -> None:
    class Flaky:
        def __init__(self, env):
            self.env, self.episode_env = env, env.episode()

        def reset(self, task):
            self.task = task
            return self.episode_env.reset(task)

        def step(self, text, finish_reason):
            if self.task.id == "b":
                raise RuntimeError("tool backend down")
            return self.episode_env.step(text, finish_reason)

    env = tool_env(tokenizer)
    env.episode = lambda inner=env.episode: Flaky(type("E", (), {"episode": staticmethod(inner)})())
    engine = TextEngine(tokenizer, lambda call, row: "42", env.chat.end_of_turn_id)
    a, b = rollout_groups(engine, env, TASKS, 1, SamplingParams(8, stop_token_ids=env.stop_token_ids), seed=0)
    assert a.finish_reason == "stop" and not a.errors
    assert b.finish_reason == "error" and "tool backend down" in b.errors[0]


class EchoEnv:
    """Never ends an episode by itself: after every turn it appends a fixed observation, so a real
    engine's episodes run all `max_turns` turns with env tokens between the sampled ones."""

    max_turns = 3

    def __init__(self, tokenizer, observation):
        self.tokenizer, self.observation = tokenizer, observation
        self.stop_token_ids = (tokenizer.eos_token_id,)

    def episode(self):
        return self

    def reset(self, task):
        return self.tokenizer(task.prompt).input_ids

    def step(self, text, finish_reason):
        return StepResult(observation_ids=list(self.observation), reward=0.5)

    def decode_response(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def test_learner_logprobs_match_the_engine_over_multi_turn_episodes(tokenizer, sharp_nano_model) -> None:
    # Invariant 1 across turns: recomputing log-probs on the stored episode (prompt, sampled turns,
    # env observations in between) gives the engine's behaviour log-probs on every sampled token.
    observation = tokenizer("=7+", add_special_tokens=False).input_ids
    env = EchoEnv(tokenizer, observation)
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=5, temperature=1.0, stop_token_ids=env.stop_token_ids)
    out = rollout_groups(engine, env, TASKS, 3, params, seed=11)
    assert all(t.num_turns == 3 and t.finish_reason == "max_turns" for t in out)
    assert all(t.turn_rewards == [0.5, 0.5, 0.5] for t in out)
    for t in out:  # the observations sit between the turns, untrained
        (s0, e0), (s1, _), _ = t.turn_spans
        assert t.token_ids[e0:s1] == observation and not any(t.loss_mask[e0:s1])
    batch = collate(out, None, tokenizer.pad_token_id)
    recomputed = compute_logprobs(sharp_nano_model, batch, micro_batch_size=8, temperature=1.0)
    mask = batch.loss_mask
    assert mask.sum() > 3 * len(out)
    # Batched recompute vs cached decode: float32 noise only (tests/float_bounds.py).
    bound = logit_bound(sharp_nano_model, [t.token_ids for t in out])
    assert torch.allclose(recomputed[mask], batch.old_logprobs[mask], atol=bound, rtol=0)
