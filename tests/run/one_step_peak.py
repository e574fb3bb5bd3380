"""Peak RSS of one steady-state RL step, measured in this process: `python tests/run/one_step_peak.py OVERRIDES_JSON`.

The memory-fit tests run it in a fresh subprocess (so the peak is this step's, not the test
runner's) and compare its numbers with reinforge.run.memory_fit's prediction.

The step is the pipeline's own parts (build_policy, build_learners, build_engine, build_reference,
prepare_batch, train_step), in the order rl_loop runs them. Two things make it the step a
prediction is for:
- Steady state: the optimizer state and the gradients exist from the first optimizer step on, so
  a one-row warm-up update (a few tokens) runs first; the measured step then holds what every
  later step of a run holds.
- Full length: no stop tokens, so every response has rollout.max_new_tokens tokens (the budget
  the prediction assumes), as benchmarks/vs_trl.py forces them.

Prints one JSON line: `peak` (bytes: the highest of the phases'), `phases` (the peak of each
phase: the high-water mark is reset before each one, /proc/self/clear_refs "5"), `before` (the
RSS as each phase starts, and `loaded` once the parts are built), `after_import`,
`prompt_tokens` (the longest prompt), `rows`, `response_tokens`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> None:
    """Start a new high-water mark at the current RSS (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def main(overrides: list[str]) -> dict:
    import torch

    from reinforge.algos.advantages import get_estimator
    from reinforge.config import load_config
    from reinforge.engines.base import SamplingParams, release_sampling_memory
    from reinforge.run.env_factory import build_env
    from reinforge.learner.batch import TrainingBatch
    from reinforge.models import lora
    from reinforge.rollout.episodes import rollout_groups
    from reinforge.run.pipeline import build_engine, build_learners, build_policy, build_reference
    from reinforge.runtime.process_settings import configure_process
    from reinforge.run.task_fit import check_tasks_fit
    from reinforge.tasks.registry import load_tasks
    from reinforge.trainer.advantage_step import prepare_batch
    from reinforge.learner.policy_objective import make_policy_objective

    after_import = status_bytes("VmRSS")
    cfg = load_config("default", overrides)
    torch.manual_seed(cfg.trainer.seed)
    configure_process(cfg.trainer.threads, cfg.trainer.cpus, cfg.trainer.retain_freed_memory)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    tokenizer = check_tasks_fit(cfg, tasks)
    model, tokenizer = build_policy(cfg, tasks, tokenizer)
    env = build_env(cfg, tokenizer)
    if cfg.model.lora is not None:
        model = lora.apply_lora(model, cfg.model.lora, seed=cfg.trainer.seed)
    learner = build_learners(cfg, {"policy": model}, env)[0]["policy"]
    engine = build_engine(cfg, model, tokenizer.pad_token_id)
    reference = build_reference(cfg, model)
    loss_fn = make_policy_objective(cfg.algo)
    r = cfg.rollout
    step_tasks = tasks.train[: r.prompts_per_step]
    prompt_tokens = max(len(env.prompt_ids(t)) for t in step_tasks)

    # Warm-up: one row of 4 tokens, so the gradients and AdamW's moments exist, as from step 2 on.
    warm = TrainingBatch(
        input_ids=torch.tensor([[1, 2, 3, 4]]), attention_mask=torch.ones(1, 4, dtype=torch.long),
        loss_mask=torch.ones(1, 3, dtype=torch.bool), old_logprobs=torch.full((1, 3), -1.0), advantages=torch.ones(1),
        ref_logprobs=torch.full((1, 3), -1.0) if reference is not None else None,
    )
    loaded = status_bytes("VmRSS")
    learner.train_step(warm, loss_fn)

    phases, before = {}, {"loaded": loaded}

    def phase(name, fn, *args, **kwargs):
        before[name] = status_bytes("VmRSS")
        reset_peak()
        out = fn(*args, **kwargs)
        phases[name] = status_bytes("VmHWM")
        return out

    phase("sync", engine.sync_weights, learner.version)
    params = SamplingParams(r.max_new_tokens, r.temperature)  # no stop tokens: every response is full length
    trajectories = phase("rollout", rollout_groups, engine, env, step_tasks, r.group_size, params, cfg.trainer.seed)
    release_sampling_memory(engine)  # as the sync schedule does
    rewards = torch.rand(len(trajectories), generator=torch.Generator().manual_seed(0)).tolist()
    for trajectory, reward in zip(trajectories, rewards):
        trajectory.rewards = {c.name: reward for c in cfg.reward.components}
        trajectory.reward = reward
    weights = {c.name: c.weight for c in cfg.reward.components}
    estimator = get_estimator(cfg.algo.advantage)
    batch, _ = phase(
        "prepare", prepare_batch, trajectories, cfg.algo, estimator, weights, tokenizer.pad_token_id, learner, reference, None
    )

    def update():
        order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
        for rows in order.chunk(cfg.algo.mini_batches):
            learner.train_step(batch.select(rows), loss_fn)

    phase("update", update)
    phase("sync_after", engine.sync_weights, learner.version)
    return {
        "peak": max(phases.values()),
        "phases": phases,
        "before": before,
        "after_import": after_import,
        "prompt_tokens": prompt_tokens,
        "rows": len(trajectories),
        "response_tokens": max(t.num_sampled_tokens for t in trajectories),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
