"""Seconds per RL step of reinforge against TRL's GRPOTrainer, on identical work, side by side.

What is measured: one model (the default recipe's tokenizer and `micro` Llama, built once, saved to
a temporary folder that both frameworks load), the default recipe's arithmetic prompts, `--tasks`
prompts x `--group-size` completions per step, each completion exactly `--new-tokens` tokens long
(reinforge: no stop tokens; TRL: `min_new_tokens` = `max_completion_length`), temperature 1.0,
fp32, the same torch thread count, one optimizer step per RL step (TRL: one generation per step,
one iteration, no gradient accumulation), PPO-clip 0.2, AdamW, gradient clipping 1.0, and a KL
penalty to a frozen reference with coefficient `--kl` (0 turns the reference off on both sides).
Rewards are random (both sides), so that advantages are non-zero and the update has a gradient.

How the pairs run: TRL's `trainer.train()` drives the loop; a callback times each TRL step (from
`on_step_begin` to `on_step_end`: generation, reward, reference forward, forward + backward,
optimizer step; not its data loading or logging) and then runs and times one reinforge step
(rollout, collate, reference forward, `PolicyLearner.train_step`, `sync_weights`). So every pair
shares the machine's moment; the first pair is a warm-up. Each side's time is CPU time of this
process (`time.process_time`: what a step costs, steadier than wall time on a shared box, where
waiting for a core is not work) and wall time; per-pair ratios TRL / reinforge and their median
are printed. Each side's mean completion length is printed too (and checked: nobody stops early).

Also in the same run: the rollout against `transformers` `generate` on the same prompts (paired
calls), and the update's share of the fp32 matmul peak (a 1024^3 fp32 matmul, same thread count,
measured after every pair, since it moves 10-25% from moment to moment on a shared box): update FLOPs
= 6 x matmul params x the positions the update computes (the [N, T] batch's, or its distinct tokens
when `algo.pack_sequences` packs it), per CPU-second of the update, over that pair's peak.

Needs TRL (an optional benchmark dependency, never a runtime one): `pip install -e ".[bench]"`.

    python benchmarks/vs_trl.py [--tasks 8] [--group-size 8] [--kl 0.05] [--pairs 6] [--threads 1]
                                [--width 1] [--new-tokens 64] [--prompt-tokens N] [--compile]
                                [--retain-freed-memory] [--json PATH]

With `--model DIR` (a real model's HF directory) it compares the two on that model instead, each
framework in a process of its own so that each one's peak memory is its own, with chat-templated
prompts, 8x4 x 128 forced tokens and KL 0.04 by default (benchmarks/vs_trl_real.py says what is
matched and how it is measured):

    python benchmarks/vs_trl.py --model DIR [--tasks 8] [--group-size 4] [--new-tokens 128] [--kl 0.04]
                                [--pairs 2] [--threads 1] [--micro-batch 8] [--trl-gradient-checkpointing on]
                                [--set algo.KEY=VALUE ...] [--recipe default] [--one-at-a-time] [--log-dir DIR]
                                [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import os
import statistics
import tempfile
import time
import warnings

import torch

from rl_step import matmul_params  # benchmarks/ is on sys.path when run as a script
from trl_phases import time_trl_phases
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run.env_factory import build_env
from reinforge.learner.batch import collate
from reinforge.learner.packed_forward import native_kernels_usable, plan_packing, worth_packing
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models.loading import load_model_and_tokenizer
from reinforge.models.tiny_llama import PRESETS
from reinforge.rollout.episodes import rollout_groups
from reinforge.run.pipeline import build_policy
from reinforge.runtime.process_settings import retain_freed_memory
from reinforge.tasks.registry import load_tasks
from reinforge.learner.policy_objective import make_policy_objective

LR = 1e-5


def matmul_peak_gflops_cpu(n: int = 1024, repeats: int = 10) -> float:
    """fp32 GFLOP per CPU-second of a large matmul (best of 3), the unit the update is measured in."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeats):
            a @ b
        best = min(best, time.process_time() - start)
    return 2 * n**3 * repeats / best / 1e9


def widened_preset(width: int) -> str:
    """The `micro` shape with `width` x its hidden and MLP sizes (head count and depth kept): a
    benchmark-only preset, registered here so the default recipe builds it like any other."""
    if width == 1:
        return "micro"
    hidden, layers, heads, kv_heads, mlp = PRESETS["micro"]
    name = f"micro-x{width}"
    PRESETS[name] = (hidden * width, layers, heads, kv_heads, mlp * width)
    return name


def benchmark_setup(width: int = 1, kl: float = 0.05, new_tokens: int = 64, prompt_tokens: int = 0):
    """The benchmark's config, tasks, model, tokenizer and env: the default recipe's, with the
    benchmark's algorithm, forced length and model width (shared by update_profile.py and
    freed_memory.py). `prompt_tokens` > 0: every task's prompt starts with one fixed instruction
    that brings it to about that many tokens (a long shared prompt, as a system prompt or few-shot
    examples make)."""
    overrides = [
        "algo.clip_eps=0.2", f"algo.kl_coef={kl}", f"rollout.max_new_tokens={new_tokens}",
        f"model.preset={widened_preset(width)}", f"model.max_positions={max(128, 32 + prompt_tokens + new_tokens)}",
    ]
    cfg = load_config("default", overrides)
    torch.manual_seed(cfg.trainer.seed)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    model, tokenizer = build_policy(cfg, tasks)
    if prompt_tokens:
        instruction = ""
        while len(tokenizer(instruction + tasks.train[0].prompt).input_ids) < prompt_tokens:
            instruction += "Work out the sum step by step, then write only the final number. "
        tasks.train = [dataclasses.replace(t, prompt=instruction + t.prompt) for t in tasks.train]
    return cfg, tasks, model, tokenizer, build_env(cfg, tokenizer)


def reinforge_alone(width: int, compile_forward: bool, steps: int) -> tuple["Reinforge", object]:
    """reinforge's side of the 8x8, KL 0.05 benchmark without TRL, over `steps` batches of tasks;
    returns it with its env."""
    cfg, tasks, model, tokenizer, env = benchmark_setup(width)
    batches = [tasks.train[i * 8 : (i + 1) * 8] for i in range(steps)]
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return Reinforge(tmp, cfg, env, batches, 8, 64, 0.05, compile_forward), env


def computed_positions(learner: PolicyLearner, batch) -> int:
    """Positions the update's forward computes: the padded batch's, or its distinct tokens when packed."""
    packing = plan_packing(batch.input_ids, batch.attention_mask)
    native = native_kernels_usable(learner.model, learner.packed_kernels)
    return packing.num_tokens if learner.pack and worth_packing(packing, batch.input_ids, native) else batch.input_ids.numel()


class Clock:
    """CPU and wall seconds of named phases, summed until `take()`."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def timed(self, name: str, fn, *args, **kwargs):
        c, w = time.process_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        out = (self.cpu, self.wall)
        self.cpu, self.wall = {}, {}
        return out


class Reinforge:
    """One RL step of reinforge, as `benchmarks/rl_step.py` runs it."""

    def __init__(self, model_dir: str, cfg, env, task_batches, group_size: int, new_tokens: int, kl: float, compile_forward: bool):
        self.model, self.tokenizer = load_model_and_tokenizer(model_dir)
        self.pad = self.tokenizer.pad_token_id
        self.env, self.task_batches, self.group_size = env, task_batches, group_size
        algo = cfg.algo
        self.loss_fn = make_policy_objective(algo)
        self.engine = TorchEngine(self.model, self.pad, dtype=cfg.rollout.engine_dtype)
        self.learner = PolicyLearner(
            self.model, LR, 0.0, 1.0, algo.micro_batch_size, False, 1.0, compile_forward=compile_forward,
        )
        self.reference = ReferenceModel(self.model, algo.micro_batch_size, 1.0, compile_forward) if kl > 0 else None
        self.params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)  # no stop tokens
        self.engine.sync_weights(self.learner.version)
        self.step_index = 0
        self.last_tokens = 0  # positions the last step's update computed
        self.completion_lengths: list[int] = []

    def step(self, clock: Clock) -> None:
        tasks = self.task_batches[self.step_index % len(self.task_batches)]
        seed = self.step_index
        self.step_index += 1
        trajectories = clock.timed(
            "rollout", rollout_groups, self.engine, self.env, tasks, self.group_size, self.params, seed=seed
        )
        self.completion_lengths += [t.num_sampled_tokens for t in trajectories]
        rewards = torch.rand(len(trajectories), generator=torch.Generator().manual_seed(seed))
        grouped = rewards.view(-1, self.group_size)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).flatten()
        batch = clock.timed("update", collate, trajectories, advantages, self.pad)
        if self.reference is not None:
            batch.ref_logprobs = clock.timed("reference", self.reference.logprobs, batch)
        clock.timed("update", self.learner.train_step, batch, self.loss_fn)
        clock.timed("update", self.engine.sync_weights, self.learner.version)
        self.last_tokens = computed_positions(self.learner, batch)


def trl_trainer(model_dir: str, prompt_texts: list[str], args, steps: int, callback, clock: Clock, out_dir: str):
    """A GRPOTrainer on the same model and prompts, with its generation and reference forward timed."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    completions = args.tasks * args.group_size

    def random_reward(completions, **kwargs):
        return torch.rand(len(completions)).tolist()

    config = GRPOConfig(
        output_dir=out_dir, max_steps=steps, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        per_device_train_batch_size=completions, gradient_accumulation_steps=1, num_generations=args.group_size,
        steps_per_generation=1, num_iterations=1, max_completion_length=args.new_tokens,
        generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0, top_p=1.0, top_k=0, beta=args.kl, epsilon=0.2, use_cpu=True, bf16=False, fp16=False,
        report_to="none", logging_steps=10**6, save_strategy="no", dataloader_num_workers=0, seed=0,
        disable_tqdm=True, log_completions=False,
    )
    dataset = Dataset.from_list([{"prompt": text} for text in prompt_texts])
    trainer = GRPOTrainer(
        model=model_dir, reward_funcs=random_reward, args=config, train_dataset=dataset, callbacks=[callback],
    )
    completion_lengths: list[int] = []
    time_trl_phases(trainer, clock.timed, lambda out: completion_lengths.extend(out["completion_mask"].sum(1).tolist()))
    return trainer, completion_lengths


def paired_steps(args, cfg, model_dir: str, env, tasks, out_dir: str) -> dict:
    from transformers import TrainerCallback

    completions = args.tasks * args.group_size
    task_batches = [tasks[i * args.tasks : (i + 1) * args.tasks] for i in range(args.pairs + 1)]
    ours = Reinforge(model_dir, cfg, env, task_batches, args.group_size, args.new_tokens, args.kl, args.compile)
    if args.compile:  # the compile is a one-time cost, reported apart from the per-step times
        start = time.perf_counter()
        ours.step(Clock())
        ours.step_index, ours.completion_lengths = 0, []
        print(f"reinforge: first step with algo.compile_forward (the compile included) took {time.perf_counter() - start:.0f} s", flush=True)
    prompt_ids = [env.episode().reset(t) for batch in task_batches for t in batch]
    # TRL's tokenizer call adds <bos> back (checked below: the same token ids on both sides)
    texts = [ours.tokenizer.decode(ids, skip_special_tokens=True) for ids in prompt_ids]

    trl_clock, our_clock = Clock(), Clock()
    pairs: list[dict] = []

    class Pair(TrainerCallback):
        def on_step_begin(self, *_, **__):
            trl_clock.take()
            self.cpu, self.wall = time.process_time(), time.perf_counter()

        def on_step_end(self, *_, **__):
            trl_cpu, trl_wall = time.process_time() - self.cpu, time.perf_counter() - self.wall
            trl_phases, _ = trl_clock.take()
            c, w = time.process_time(), time.perf_counter()
            ours.step(our_clock)
            our_cpu, our_wall = time.process_time() - c, time.perf_counter() - w
            our_phases, _ = our_clock.take()
            trl_phases["update"] = trl_cpu - trl_phases.get("rollout", 0.0) - trl_phases.get("reference", 0.0)
            trl_phases.pop("_policy", None)
            # the peak moves 10-25% between moments on a shared box: measured in every pair
            pairs.append({
                "trl_cpu": trl_cpu, "trl_wall": trl_wall, "ours_cpu": our_cpu, "ours_wall": our_wall,
                "trl_phases": trl_phases, "ours_phases": our_phases, "load": os.getloadavg()[0],
                "batch_positions": ours.last_tokens, "peak_gflops": matmul_peak_gflops_cpu(repeats=3),
            })
            print(
                f"  pair {len(pairs) - 1}{' (warm-up)' if len(pairs) == 1 else ''}: TRL {trl_cpu:.2f} cpu-s "
                f"({trl_wall:.2f} s), reinforge {our_cpu:.2f} cpu-s ({our_wall:.2f} s): "
                f"{trl_cpu / our_cpu:.2f}x (wall {trl_wall / our_wall:.2f}x), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

    trainer, trl_lengths = trl_trainer(model_dir, texts, args, args.pairs + 1, Pair(), trl_clock, out_dir)
    trl_prompt = [len(ids) for ids in trainer.processing_class(text=texts)["input_ids"]]
    our_prompt = [len(ids) for ids in prompt_ids]
    if trl_prompt != our_prompt:
        raise RuntimeError("TRL tokenizes the prompts differently from the env: the work would not be identical")
    trainer.train()
    if len(pairs) != args.pairs + 1:
        raise RuntimeError(f"expected {args.pairs + 1} TRL steps, saw {len(pairs)}")
    for side, lengths in (("TRL", trl_lengths), ("reinforge", ours.completion_lengths)):
        if len(lengths) != completions * (args.pairs + 1):
            raise RuntimeError(f"{side} sampled {len(lengths)} completions, expected {completions * (args.pairs + 1)}")
    timed = pairs[1:]
    phases = [phase for phase in ("rollout", "reference", "update") if phase in timed[0]["ours_phases"]]
    return {
        "pairs": timed,
        "ratio_cpu": statistics.median(p["trl_cpu"] / p["ours_cpu"] for p in timed),
        "ratio_wall": statistics.median(p["trl_wall"] / p["ours_wall"] for p in timed),
        "phase_ratio_cpu": {
            phase: statistics.median(p["trl_phases"].get(phase, 0.0) / p["ours_phases"][phase] for p in timed)
            for phase in phases
        },
        "ours_phases_cpu": {phase: statistics.median(p["ours_phases"][phase] for p in timed) for phase in phases},
        "trl_mean_completion": sum(trl_lengths) / len(trl_lengths),
        "ours_mean_completion": sum(ours.completion_lengths) / len(ours.completion_lengths),
        "ours": ours,
        "prompt_tokens_mean": sum(our_prompt) / len(our_prompt),
    }


def rollout_vs_generate(ours: Reinforge, env, tasks, group_size: int, new_tokens: int, rounds: int) -> float:
    """Median over paired calls of generate's CPU seconds / the engine's, on one step's prompts."""
    prompts = [env.episode().reset(t) for t in tasks for _ in range(group_size)]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), ours.pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :], mask[row, width - len(p) :] = torch.tensor(p), 1
    model = ours.model.eval()
    ratios = []
    for round_ in range(rounds + 1):
        c = time.process_time()
        generations = ours.engine.generate(prompts, ours.params, seed=round_)
        engine_cpu = time.process_time() - c
        c = time.process_time()
        torch.manual_seed(round_)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=ours.pad,
            )
        generate_cpu = time.process_time() - c
        if out.shape[1] - width != new_tokens or any(len(g.token_ids) != new_tokens for g in generations):
            raise RuntimeError("a rollout stopped early")
        if round_:
            ratios.append(generate_cpu / engine_cpu)
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, metavar="DIR", help="a real model's HF directory: both sides load it, each in its own process (benchmarks/vs_trl_real.py); default: the toy model")
    parser.add_argument("--tasks", type=int, default=None, help="prompts per step (default 8)")
    parser.add_argument("--group-size", type=int, default=None, help="completions per prompt (default 8; with --model 4)")
    parser.add_argument("--new-tokens", type=int, default=None, help="sampled tokens per completion, forced (default 64; with --model 128)")
    parser.add_argument("--prompt-tokens", type=int, default=0, help="toy model: lengthen every prompt to about this many tokens with one fixed instruction")
    parser.add_argument("--kl", type=float, default=None, help="KL coefficient, 0: no reference model (default 0.05; with --model 0.04)")
    parser.add_argument("--pairs", type=int, default=None, help="timed pairs after one warm-up pair (default 6; with --model 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides")
    parser.add_argument("--width", type=int, default=1, help="toy model: hidden and MLP sizes as a multiple of the micro preset's")
    parser.add_argument("--compile", action="store_true", help="toy model: reinforge with algo.compile_forward (TRL stays eager, its default)")
    parser.add_argument("--generate-rounds", type=int, default=3, help="toy model: paired engine / generate calls")
    parser.add_argument(
        "--retain-freed-memory", action="store_true",
        help="toy model: keep freed heap memory mapped, as `reinforge train` does by default (trainer.retain_freed_memory): a process setting, so both sides get it (with --model, reinforge's side follows its config, TRL's is left as it is)",
    )
    parser.add_argument("--recipe", default="default", help="with --model: the recipe whose tasks are the prompts (rendered with the model's chat template)")
    parser.add_argument("--micro-batch", type=int, default=8, help="with --model: rows per forward/backward on both sides (TRL: per_device_train_batch_size, with gradient accumulation over the step)")
    parser.add_argument("--trl-gradient-checkpointing", choices=("on", "off"), default="on", help="with --model: TRL's gradient_checkpointing (on: GRPOConfig's default)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="with --model: a config override for reinforge's side (repeatable), e.g. algo.activation_checkpointing=true")
    parser.add_argument("--one-at-a-time", action="store_true", help="with --model: run reinforge's steps, then TRL's, never both processes at once (for a machine without the memory for both); default: interleaved")
    parser.add_argument("--log-dir", default=None, help="with --model: keep each side's output log here (default: a temporary folder, gone after the run)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if importlib.util.find_spec("trl") is None:
        raise SystemExit("benchmarks/vs_trl.py needs TRL, an optional benchmark dependency: pip install -e \".[bench]\"")
    real = args.model is not None
    for name, toy, with_model in (("tasks", 8, 8), ("group_size", 8, 4), ("new_tokens", 64, 128), ("kl", 0.05, 0.04), ("pairs", 6, 2)):
        if getattr(args, name) is None:
            setattr(args, name, with_model if real else toy)
    if real:
        toy_only = [flag for flag, used in (("--prompt-tokens", args.prompt_tokens), ("--width", args.width != 1), ("--compile", args.compile),
                    ("--retain-freed-memory", args.retain_freed_memory)) if used]
        if toy_only:
            raise SystemExit(f"{', '.join(toy_only)}: toy-model options; with --model, pass reinforge's settings as --set key=value")
        if not os.path.isdir(args.model):
            raise SystemExit(f"--model {args.model}: not a directory (fetch one with `reinforge model fetch smollm2-135m-instruct`)")
        from vs_trl_real import run_real

        run_real(args)
        return
    if args.set or args.micro_batch != 8 or args.recipe != "default" or args.trl_gradient_checkpointing != "on" or args.log_dir or args.one_at_a_time:
        raise SystemExit("--set, --micro-batch, --recipe, --trl-gradient-checkpointing, --one-at-a-time and --log-dir go with --model DIR")
    torch.set_num_threads(args.threads)
    if args.retain_freed_memory and not retain_freed_memory():
        raise SystemExit("--retain-freed-memory: not applied (not glibc, or a MALLOC_* tunable is set)")
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)

    cfg, tasks, model, tokenizer, env = benchmark_setup(args.width, args.kl, args.new_tokens, args.prompt_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        del model
        result = paired_steps(args, cfg, model_dir, env, tasks.train, os.path.join(tmp, "trl"))
        ours = result.pop("ours")
        x_generate = rollout_vs_generate(ours, env, tasks.train[: args.tasks], args.group_size, args.new_tokens, args.generate_rounds)
        n_params = matmul_params(ours.model)

    update_cpu = result["ours_phases_cpu"]["update"]
    peaks = [p["peak_gflops"] for p in result["pairs"]]
    peak = statistics.median(peaks)
    update_pct = statistics.median(
        100 * 6 * n_params * p["batch_positions"] / p["ours_phases"]["update"] / 1e9 / p["peak_gflops"] for p in result["pairs"]
    )
    completions = args.tasks * args.group_size
    loads = [p["load"] for p in result["pairs"]]
    print(
        f"model: {cfg.model.preset} ({n_params / 1e6:.2f}M matmul params), {args.tasks}x{args.group_size} = "
        f"{completions} completions x {args.new_tokens} tokens, prompts {result['prompt_tokens_mean']:.1f} tokens, "
        f"KL {'on (' + str(args.kl) + ')' if args.kl > 0 else 'off'}{', reinforge compiled' if args.compile else ''}, threads={torch.get_num_threads()}, "
        f"{args.pairs} pairs, load {min(loads):.1f}-{max(loads):.1f}"
    )
    per_pair = " ".join(f"{p['trl_cpu'] / p['ours_cpu']:.2f}" for p in result["pairs"])
    print(f"per-pair TRL / reinforge (cpu): {per_pair}")
    print(f"RL step: reinforge is {result['ratio_cpu']:.2f}x TRL (median, CPU time; wall {result['ratio_wall']:.2f}x)")
    phases = ", ".join(f"{k} {v:.2f}x" for k, v in result["phase_ratio_cpu"].items())
    shares = ", ".join(f"{k} {v:.2f} s" for k, v in result["ours_phases_cpu"].items())
    print(f"by phase (TRL / reinforge): {phases}; reinforge cpu-s per phase: {shares}")
    print(f"mean completion length: TRL {result['trl_mean_completion']:.1f}, reinforge {result['ours_mean_completion']:.1f}")
    caveat = " (with --compile, generate runs the compiled forward: compare runs without it)" if args.compile else ""
    print(f"rollout: {x_generate:.2f}x generate (median of {args.generate_rounds} paired calls, CPU time){caveat}")
    print(
        f"update: {update_pct:.0f}% of the fp32 matmul peak (median over pairs; peak {peak:.0f} GFLOP per CPU-second, "
        f"{min(peaks):.0f}-{max(peaks):.0f} across pairs), "
        f"{ours.last_tokens / update_cpu:.0f} positions per CPU-second ({ours.last_tokens} computed per step)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), **result, "x_generate": x_generate, "update_pct_fp32_peak": update_pct,
                       "peak_gflops_fp32_per_cpu_s": peak, "update_positions_per_cpu_s": ours.last_tokens / update_cpu, "matmul_params": n_params}, f, indent=2)


if __name__ == "__main__":
    main()
