"""The exact-token check for an adapter env: episodes run with the real TorchEngine on a tiny model
hold exactly the prompt's ids, the engine's sampled ids and the env's observation ids (never a
re-tokenization), and the learner's log-probs on them equal the engine's behaviour log-probs."""

from __future__ import annotations

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import compute_logprobs
from reinforge.rollout.episodes import rollout_groups
from float_bounds import logit_bound


class RecordingEngine:
    """A TorchEngine that remembers, per call, what it sampled for each prompt."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, prompts, params, seed=None):
        generations = self.engine.generate(prompts, params, seed=seed)
        self.calls.append(list(zip(prompts, generations)))
        return generations


class RecordingEpisode:
    def __init__(self, inner, log):
        self.inner, self.observations = inner, []
        log.append(self)

    def reset(self, task):
        return self.inner.reset(task)

    def step(self, text, finish_reason):
        result = self.inner.step(text, finish_reason)
        self.observations.append(list(result.observation_ids))
        return result


def run_and_check_exact_tokens(env, tasks, model, tokenizer, group_size=2, max_new_tokens=6, seed=3):
    """Runs the episodes; asserts the token and log-prob invariants; returns the trajectories."""
    engine = RecordingEngine(TorchEngine(model, tokenizer.pad_token_id))
    log: list[RecordingEpisode] = []
    make_episode = env.episode
    env.episode = lambda: RecordingEpisode(make_episode(), log)
    try:
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, stop_token_ids=env.stop_token_ids)
        out = rollout_groups(engine, env, tasks, group_size, params, seed=seed)
    finally:
        env.episode = make_episode
    assert len(out) == len(tasks) * group_size == len(log)

    for row, (trajectory, episode) in enumerate(zip(out, log)):
        task = next(t for t in tasks if t.id == trajectory.task_id)
        expected = list(env.prompt_ids(task))
        assert trajectory.token_ids[: trajectory.prompt_length] == expected
        mask = [False] * len(expected)
        for turn, (start, end) in enumerate(trajectory.turn_spans):
            assert start == len(expected)
            # the live episodes of call `turn` are, in order, those with more than `turn` turns
            position = sum(t.num_turns > turn for t in out[:row])
            prompt, generation = engine.calls[turn][position]
            assert list(prompt) == expected  # the engine saw exactly the episode so far
            sampled = generation.token_ids
            expected += sampled
            mask += [True] * len(sampled)
            assert end == len(expected)
            if turn + 1 < len(trajectory.turn_spans):  # the env's reply, as the env tokenized it
                expected += episode.observations[turn]
                mask += [False] * len(episode.observations[turn])
        assert trajectory.token_ids == expected
        assert trajectory.loss_mask == mask

    batch = collate(out, None, tokenizer.pad_token_id)
    recomputed = compute_logprobs(model, batch, micro_batch_size=8, temperature=1.0)
    mask = batch.loss_mask
    assert mask.sum() > 0
    bound = logit_bound(model, [t.token_ids for t in out])
    assert torch.allclose(recomputed[mask], batch.old_logprobs[mask], atol=bound, rtol=0)
    return out


def imitate(model, env, tasks, steps=60, lr=1e-2):
    """A few supervised steps on the tasks' demonstrations (env.sft_example), so that a tiny model
    writes what an env reacts to (tool calls) and episodes really have several turns."""
    from reinforge.trainer.sft import sft_batch, sft_loss

    examples = [env.sft_example(t) for t in tasks]
    input_ids, attention, target = sft_batch(examples, env.tokenizer.pad_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        sft_loss(model, input_ids, attention, target).backward()
        optimizer.step()
    return model.eval()
