"""`benchmarks/vs_trl.py --model DIR`: reinforge against TRL's GRPOTrainer on a real model, CPU time
per RL step and peak memory, each framework in a process of its own.

What is compared: the model in DIR (a Hugging Face directory, e.g. SmolLM2-135M-Instruct from
`reinforge model fetch smollm2-135m-instruct`), loaded in fp32 by both; the recipe's task prompts
(`--recipe`, default the arithmetic tasks of `default`) rendered with the model's chat template on
both sides (TRL gets the messages and applies the template itself; the prompt ids are checked equal,
step by step); `--tasks` prompts x `--group-size` completions per step; every completion exactly
`--new-tokens` tokens (TRL: `min_new_tokens` = `max_completion_length`, which masks EOS out of the
sampling; reinforge: no stop tokens; checked on both sides); temperature 1.0, no top-k / top-p;
PPO-clip 0.2 with token-mean loss (TRL's `dapo`), AdamW at lr 1e-5, gradient clipping 1.0, a k3 KL
penalty in the loss with coefficient `--kl` (0: no reference model on either side); one optimizer
step per RL step over micro-batches of `--micro-batch` rows (TRL: `per_device_train_batch_size`
with gradient accumulation over the step's completions, one generation per step); random rewards
(so the update has a gradient); the same torch thread count. TRL keeps its own defaults otherwise,
gradient checkpointing included (`--trl-gradient-checkpointing`); reinforge runs as `reinforge
train` builds it (its learner, reference and engine from the recipe's config, the process set up by
`trainer.*`), and `--set key=value` passes any other config key to it (e.g. memory knobs).

How it is measured: one process per side (benchmarks/vs_trl_sides.py), both loaded first; then
pairs of steps, the first a warm-up, the order alternating (reinforge then TRL, then TRL then
reinforge, ...) so that a drift in the machine's load falls on both. With `--one-at-a-time` (a
machine without the memory for both processes at once) reinforge's steps run first, its process
exits, then TRL's; pairs are formed by step index. A step's cost is the CPU time
of its process (`time.process_time`: steadier than wall time on a shared box); its peak memory is
its process's VmHWM, reset before each step. Printed: per-pair and median CPU-time ratio TRL /
reinforge, the ratio per phase (rollout, reference, update) and each side's CPU-s per phase, each
side's peak RSS (the whole process, loading included) and its ratio, the RSS right after loading,
and the machine's load.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
LR = 1e-5
SIDES_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vs_trl_sides.py")


def reinforge_overrides(args) -> list[str]:
    """The config of reinforge's side: the recipe, with every setting the comparison fixes, then `--set`."""
    return [
        f"model.path={args.model}", "rollout.prompt_format=chat", f"rollout.max_new_tokens={args.new_tokens}",
        "rollout.temperature=1.0", "rollout.top_k=0", "rollout.top_p=1.0",
        f"rollout.group_size={args.group_size}", f"rollout.prompts_per_step={args.tasks}",
        "algo.policy_loss=ppo_clip", "algo.clip_eps=0.2", "algo.loss_agg=token_mean", f"algo.lr={LR}",
        "algo.weight_decay=0.0", "algo.max_grad_norm=1.0", "algo.lr_warmup_steps=0", "algo.entropy_coef=0.0",
        f"algo.kl_coef={args.kl}", "algo.kl_estimator=k3", "algo.kl_in_reward=false",
        "algo.epochs=1", "algo.mini_batches=1", f"algo.micro_batch_size={args.micro_batch}",
        f"task.train_size={max(args.tasks * (args.pairs + 1), 64)}", f"trainer.threads={args.threads}",
        *args.set,
    ]


def chat_prompts(args, overrides: list[str]) -> list[list[dict]]:
    """The messages of the prompts both sides sample from, step after step, in order."""
    from reinforge.config import load_config
    from reinforge.envs.single_turn import chat_messages
    from reinforge.tasks.registry import load_tasks

    cfg = load_config(args.recipe, overrides)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed).train[: args.tasks * (args.pairs + 1)]
    return [chat_messages(task) for task in tasks]


class Side:
    """One framework's process: `step()` runs one RL step there and returns its measurements."""

    def __init__(self, name: str, spec_path: str, log_dir: str, threads: int):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        read_fd, write_fd = os.pipe()
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, SIDES_SCRIPT, name, spec_path, str(write_fd)], stdin=subprocess.PIPE,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env, text=True,
            )
        os.close(write_fd)
        self.results = os.fdopen(read_fd)
        self.steps: list[dict] = []

    def receive(self, event: str) -> dict:
        line = self.results.readline()
        if not line:
            self.proc.wait()
            with open(self.log_path) as f:
                tail = "".join(f.readlines()[-30:])
            raise RuntimeError(f"the {self.name} side exited (code {self.proc.returncode}) before its '{event}'; its log ends:\n{tail}")
        message = json.loads(line)
        if message["event"] != event:
            raise RuntimeError(f"the {self.name} side sent '{message['event']}' where '{event}' was expected")
        return message

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def step(self) -> dict:
        self.send("step")
        result = self.receive("step")
        self.steps.append(result)
        return result

    def close(self) -> dict:
        self.send("quit")
        done = self.receive("done")
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        return done

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def check_same_work(args, ours: list[dict], trl: list[dict]) -> None:
    """Both sides sampled the same prompts (token for token) and every completion at full length."""
    completions = args.tasks * args.group_size
    for index, (a, b) in enumerate(zip(ours, trl)):
        if a["prompt_ids"] != b["prompt_ids"]:
            raise RuntimeError(f"step {index}: the two sides' prompt token ids differ: the work would not be identical")
        for side, step in (("reinforge", a), ("TRL", b)):
            lengths = step["completion_lengths"]
            if len(lengths) != completions or any(n != args.new_tokens for n in lengths):
                raise RuntimeError(
                    f"step {index}: {side} sampled {len(lengths)} completions of {min(lengths, default=0)}-"
                    f"{max(lengths, default=0)} tokens, expected {completions} of {args.new_tokens}"
                )


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_real(args) -> None:
    """Runs the pairs, checks the work was the same, prints the comparison (and writes --json)."""
    completions = args.tasks * args.group_size
    if completions % args.micro_batch:
        raise SystemExit(f"--micro-batch {args.micro_batch} must divide the {completions} completions of a step (--tasks x --group-size)")
    overrides = reinforge_overrides(args)
    prompts = chat_prompts(args, overrides)
    if len(prompts) < args.tasks * (args.pairs + 1):
        raise SystemExit(f"the recipe has {len(prompts)} training tasks; {args.tasks * (args.pairs + 1)} are needed")
    with tempfile.TemporaryDirectory() as tmp:
        spec = {
            "model_dir": args.model, "recipe": args.recipe, "reinforge_overrides": overrides, "prompts": prompts,
            "tasks": args.tasks, "group_size": args.group_size, "new_tokens": args.new_tokens, "kl": args.kl,
            "lr": LR, "threads": args.threads, "steps": args.pairs + 1, "micro_batch": args.micro_batch,
            "trl_gradient_checkpointing": args.trl_gradient_checkpointing == "on", "out_dir": os.path.join(tmp, "trl"),
        }
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        log_dir = args.log_dir or tmp
        os.makedirs(log_dir, exist_ok=True)
        print(f"load at start: {uptime()}", flush=True)
        sides: dict[str, Side] = {}
        ready, done = {}, {}
        try:
            if args.one_at_a_time:  # each side's steps in a row, its process gone before the other starts
                for name in ("reinforge", "trl"):
                    sides[name] = Side(name, spec_path, log_dir, args.threads)
                    ready[name] = sides[name].receive("ready")
                    for _ in range(args.pairs + 1):
                        sides[name].step()
                    done[name] = sides[name].close()
                for pair, (ours, trl) in enumerate(zip(sides["reinforge"].steps, sides["trl"].steps)):
                    print_pair(pair, ours, trl)
            else:
                for name in ("reinforge", "trl"):  # one load at a time: their load peaks do not add up
                    sides[name] = Side(name, spec_path, log_dir, args.threads)
                    ready[name] = sides[name].receive("ready")
                for pair in range(args.pairs + 1):
                    order = ("reinforge", "trl") if pair % 2 == 0 else ("trl", "reinforge")
                    for name in order:
                        sides[name].step()
                    print_pair(pair, sides["reinforge"].steps[-1], sides["trl"].steps[-1])
                done = {name: side.close() for name, side in sides.items()}
        finally:
            for side in sides.values():
                side.kill()
        print(f"load at end: {uptime()}", flush=True)
    ours, trl = sides["reinforge"].steps, sides["trl"].steps
    check_same_work(args, ours, trl)
    result = summarize(ours[1:], trl[1:], ready, done, ours + trl)
    print_summary(args, result, ready, prompts_tokens=[len(p) for s in ours for p in s["prompt_ids"]])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "reinforge_steps": ours, "trl_steps": trl, "ready": ready, "done": done, **result}, f, indent=2)


def print_pair(index: int, ours: dict, trl: dict) -> None:
    peaks = ""
    if ours["step_peak_rss"] and trl["step_peak_rss"]:
        peaks = f", step peak RSS reinforge {ours['step_peak_rss'] / GIB:.2f} GiB, TRL {trl['step_peak_rss'] / GIB:.2f} GiB"
    print(
        f"  pair {index}{' (warm-up)' if index == 0 else ''}: TRL {trl['cpu']:.1f} cpu-s ({trl['wall']:.1f} s), "
        f"reinforge {ours['cpu']:.1f} cpu-s ({ours['wall']:.1f} s): {trl['cpu'] / ours['cpu']:.2f}x{peaks}, "
        f"load {ours['load']:.1f}/{trl['load']:.1f}",
        flush=True,
    )


def summarize(ours: list[dict], trl: list[dict], ready: dict, done: dict, all_steps: list[dict]) -> dict:
    phases = [p for p in ("rollout", "reference", "update") if p in ours[0]["phases"]]
    return {
        "ratio_cpu": statistics.median(b["cpu"] / a["cpu"] for a, b in zip(ours, trl)),
        "ratio_wall": statistics.median(b["wall"] / a["wall"] for a, b in zip(ours, trl)),
        "phase_ratio_cpu": {
            p: statistics.median(b["phases"].get(p, 0.0) / a["phases"][p] for a, b in zip(ours, trl)) for p in phases
        },
        "reinforge_phases_cpu": {p: statistics.median(a["phases"][p] for a in ours) for p in phases},
        "trl_phases_cpu": {p: statistics.median(b["phases"].get(p, 0.0) for b in trl) for p in phases},
        "reinforge_cpu": statistics.median(a["cpu"] for a in ours),
        "trl_cpu": statistics.median(b["cpu"] for b in trl),
        "peak_rss": {name: done[name]["peak_rss"] for name in done},
        "peak_rss_ratio": done["reinforge"]["peak_rss"] / done["trl"]["peak_rss"],
        "loads": [s["load"] for s in all_steps],
    }


def print_summary(args, r: dict, ready: dict, prompts_tokens: list[int]) -> None:
    kl = f"KL on ({args.kl})" if args.kl > 0 else "KL off"
    print(
        f"model: {args.model} ({ready['reinforge']['params'] / 1e6:.1f}M trained weights), {args.tasks}x{args.group_size} = "
        f"{args.tasks * args.group_size} completions x {args.new_tokens} tokens, chat prompts of "
        f"{min(prompts_tokens)}-{max(prompts_tokens)} tokens, {kl}, fp32, threads={args.threads}, micro-batches of "
        f"{args.micro_batch} rows, TRL gradient checkpointing {args.trl_gradient_checkpointing}, "
        f"reinforge --set {' '.join(args.set) or '(none)'}; {args.pairs} timed pairs after 1 warm-up"
        f"{' (one side at a time)' if args.one_at_a_time else ' (interleaved)'}, "
        f"load {min(r['loads']):.1f}-{max(r['loads']):.1f}"
    )
    print(f"RL step: reinforge {r['reinforge_cpu']:.1f} cpu-s, TRL {r['trl_cpu']:.1f}: reinforge is {r['ratio_cpu']:.2f}x TRL "
          f"(median of per-pair ratios, CPU time; wall {r['ratio_wall']:.2f}x)")
    ratios = ", ".join(f"{p} {v:.2f}x" for p, v in r["phase_ratio_cpu"].items())
    ours = ", ".join(f"{p} {v:.1f}" for p, v in r["reinforge_phases_cpu"].items())
    trl = ", ".join(f"{p} {v:.1f}" for p, v in r["trl_phases_cpu"].items())
    print(f"by phase (TRL / reinforge): {ratios}; cpu-s: reinforge {ours}; TRL {trl}")
    peak = r["peak_rss"]
    print(
        f"peak RSS: reinforge {peak['reinforge'] / GIB:.2f} GiB, TRL {peak['trl'] / GIB:.2f} GiB: {r['peak_rss_ratio']:.2f}x TRL's "
        f"(after loading: reinforge {ready['reinforge']['rss'] / GIB:.2f} GiB, TRL {ready['trl']['rss'] / GIB:.2f} GiB)"
    )
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    print(f"targets: >= 2x TRL per step: {met(r['ratio_cpu'] >= 2)}; <= 0.5x TRL's peak RSS: {met(r['peak_rss_ratio'] <= 0.5)}")
