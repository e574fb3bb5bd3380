"""The two sides of `benchmarks/vs_trl.py --model DIR`, each in a process of its own.

    python benchmarks/vs_trl_sides.py reinforge|trl SPEC.json RESULT_FD

One process per framework, so that each one's peak memory is its own (VmHWM of /proc/self/status;
reset before every step through /proc/self/clear_refs, so each step's peak is read apart from the
load's). The driver (benchmarks/vs_trl_real.py) writes one line `step` to a side's stdin to run one
RL step, or `quit`; the side answers on RESULT_FD with one JSON line per event: `ready` once loaded,
`step` after each step (CPU and wall seconds, CPU seconds per phase, the step's peak RSS, the prompt
ids and completion lengths it sampled), `done` before it exits. Its own prints and warnings go to
its stdout and stderr, which the driver keeps in a log.

Phases, the same on both sides: rollout (sampling the completions), reference (the frozen
reference's log-probs, KL on only) and update (the rest of the step: rewards, advantages, batching,
the policy's forward and backward, the optimizer step, the weight hand-over to the sampler).
"""

from __future__ import annotations

import json
import os
import sys
import time

GIB = 1 << 30


def memory_status() -> dict[str, int]:
    """VmRSS and VmHWM (the peak RSS since start or since the last `reset_peak`), in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
    return out


def reset_peak() -> bool:
    """Start VmHWM again from the current RSS (Linux: `5` to clear_refs). False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Phases:
    """CPU seconds of named phases within a step."""

    def __init__(self):
        self.cpu: dict[str, float] = {}

    def timed(self, name: str, fn, *args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - start


class Channel:
    """Commands in on stdin, JSON events out on the result fd; keeps the process's lifetime peak RSS
    across the per-step resets."""

    def __init__(self, fd: int):
        self.out = os.fdopen(fd, "w", buffering=1)
        self.lifetime_peak = 0
        self.resettable = True

    def command(self) -> str:
        line = sys.stdin.readline()
        return line.strip() or "quit"  # EOF: the driver is gone

    def send(self, event: str, **fields) -> None:
        self.out.write(json.dumps({"event": event, **fields}) + "\n")

    def begin_step(self) -> tuple[float, float]:
        self.lifetime_peak = max(self.lifetime_peak, memory_status()["VmHWM"])
        self.resettable = self.resettable and reset_peak()
        return time.process_time(), time.perf_counter()

    def end_step(self, started: tuple[float, float], phases: dict[str, float], **fields) -> None:
        cpu, wall = time.process_time() - started[0], time.perf_counter() - started[1]
        mem = memory_status()
        self.lifetime_peak = max(self.lifetime_peak, mem["VmHWM"])
        # what no phase timer covers is the update's: the same definition on both sides
        phases = {**phases, "update": cpu - phases.get("rollout", 0.0) - phases.get("reference", 0.0)}
        self.send(
            "step", cpu=cpu, wall=wall, phases=phases, step_peak_rss=mem["VmHWM"] if self.resettable else None,
            rss_after=mem["VmRSS"], load=os.getloadavg()[0], **fields,
        )

    def finish(self) -> None:
        self.lifetime_peak = max(self.lifetime_peak, memory_status()["VmHWM"])
        self.send("done", peak_rss=self.lifetime_peak)


def reinforge_side(spec: dict, channel: Channel) -> None:
    """reinforge's RL step as `reinforge train` builds it (pipeline's learner, reference and engine
    from the config, so every `--set` knob applies), on random rewards."""
    import torch

    from reinforge.config import load_config
    from reinforge.engines.base import SamplingParams, release_sampling_memory
    from reinforge.run.env_factory import build_env
    from reinforge.learner.batch import collate
    from reinforge.models.loading import load_model_and_tokenizer
    from reinforge.rollout.episodes import rollout_groups
    from reinforge.run.pipeline import build_engine, build_learners, build_reference
    from reinforge.runtime.process_settings import configure_process
    from reinforge.tasks.registry import load_tasks
    from reinforge.learner.policy_objective import make_policy_objective

    cfg = load_config("default", spec["reinforge_overrides"])
    configure_process(cfg.trainer.threads, cfg.trainer.cpus, cfg.trainer.retain_freed_memory)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed).train
    model, tokenizer = load_model_and_tokenizer(cfg.model.path)
    env = build_env(cfg, tokenizer)
    learner = build_learners(cfg, {"policy": model}, env)[0]["policy"]
    reference = build_reference(cfg, model)
    engine = build_engine(cfg, model, tokenizer.pad_token_id)
    engine.sync_weights(learner.version)
    loss_fn = make_policy_objective(cfg.algo)
    # no stop tokens: every completion is exactly max_new_tokens long (an <|im_end|> sampled on the
    # way ends nothing; TRL's side masks it out instead, and both sides sample the same count)
    params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature)
    group, per_step = spec["group_size"], spec["tasks"]
    channel.send("ready", rss=memory_status()["VmRSS"], threads=torch.get_num_threads(), params=learner.trainable_params)

    step = 0
    while channel.command() == "step":
        batch_tasks = tasks[step * per_step : (step + 1) * per_step]
        phases = Phases()
        started = channel.begin_step()
        trajectories = phases.timed("rollout", rollout_groups, engine, env, batch_tasks, group, params, seed=step)
        release_sampling_memory(engine)  # as `reinforge train`'s sync schedule does
        rewards = torch.rand(len(trajectories), generator=torch.Generator().manual_seed(step))
        grouped = rewards.view(-1, group)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).flatten()
        batch = collate(trajectories, advantages, tokenizer.pad_token_id)
        if reference is not None:
            batch.ref_logprobs = phases.timed("reference", reference.logprobs, batch)
        learner.train_step(batch, loss_fn)
        engine.sync_weights(learner.version)
        prompts = [t.token_ids[: t.prompt_length] for t in trajectories[::group]]
        channel.end_step(
            started, phases.cpu, completion_lengths=[t.num_sampled_tokens for t in trajectories], prompt_ids=prompts,
        )
        step += 1
    channel.finish()


def trl_side(spec: dict, channel: Channel) -> None:
    """TRL's GRPOTrainer on the same model, prompts and settings; `trainer.train()` drives the loop,
    and a callback holds each optimizer step until the driver says `step`."""
    import torch
    from datasets import Dataset
    from trl_phases import time_trl_phases  # benchmarks/ is sys.path[0]: this file runs as a script
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(spec["threads"])
    completions = spec["tasks"] * spec["group_size"]
    micro = spec["micro_batch"]

    def random_reward(completions, **kwargs):
        return torch.rand(len(completions)).tolist()

    config = GRPOConfig(
        output_dir=spec["out_dir"], max_steps=spec["steps"], learning_rate=spec["lr"], lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        # one generation of `completions` per optimizer step, in micro-batches of `micro` rows
        per_device_train_batch_size=micro, gradient_accumulation_steps=completions // micro,
        steps_per_generation=completions // micro, num_iterations=1, num_generations=spec["group_size"],
        max_completion_length=spec["new_tokens"], generation_kwargs={"min_new_tokens": spec["new_tokens"]},
        temperature=1.0, top_p=1.0, top_k=0, beta=spec["kl"], epsilon=0.2, loss_type="dapo", scale_rewards="group",
        gradient_checkpointing=spec["trl_gradient_checkpointing"], model_init_kwargs={"dtype": "float32"},
        use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=10**6, save_strategy="no",
        dataloader_num_workers=0, seed=0, disable_tqdm=True, log_completions=False, shuffle_dataset=False,
    )
    dataset = Dataset.from_list([{"prompt": messages} for messages in spec["prompts"]])
    phases = Phases()
    sampled: dict[str, list] = {"completion_lengths": [], "prompt_ids": []}

    class Held(TrainerCallback):
        def on_step_begin(self, *_, **__):
            if channel.command() != "step":
                raise SystemExit(0)  # the driver stopped early: nothing more to measure
            phases.cpu = {}
            sampled["completion_lengths"], sampled["prompt_ids"] = [], []
            self.started = channel.begin_step()

        def on_step_end(self, *_, **__):
            cpu = {name: seconds for name, seconds in phases.cpu.items() if not name.startswith("_")}
            channel.end_step(self.started, cpu, **sampled)

    trainer = GRPOTrainer(
        model=spec["model_dir"], reward_funcs=random_reward, args=config, train_dataset=dataset, callbacks=[Held()],
    )
    def on_scored(out: dict) -> None:
        sampled["completion_lengths"] += out["completion_mask"].sum(1).tolist()
        group = spec["group_size"]
        for ids, mask in zip(out["prompt_ids"][::group], out["prompt_mask"][::group]):
            sampled["prompt_ids"].append(ids[mask.bool()].tolist())

    time_trl_phases(trainer, phases.timed, on_scored)
    params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    channel.send("ready", rss=memory_status()["VmRSS"], threads=torch.get_num_threads(), params=params)
    trainer.train()
    while channel.command() != "quit":
        pass
    channel.finish()


def main() -> None:
    side, spec_path, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(spec_path) as f:
        spec = json.load(f)
    channel = Channel(fd)
    {"reinforge": reinforge_side, "trl": trl_side}[side](spec, channel)


if __name__ == "__main__":
    main()
