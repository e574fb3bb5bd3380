"""`reinforge eval --model DIR --samples K`: score a saved model on the held-out tasks.

Loads a Hugging Face model (directory, Hub id, .gguf or fetched name: reinforge.models.model_source) and the held-out split of the configured task source
(the run's own config when the model is inside a run directory: reinforge.config.eval_config),
runs `evaluate` (greedy + K samples per task, the same code the training loop uses), and reports
greedy accuracy, mean@K and pass@k (k >= 2) with 95% bootstrap CIs, overall and per task family:
as a table on the terminal, and as `eval.json` / `eval.md` (plus every response in
`eval_records.jsonl`) in the output directory. mean@K is also pass@1 (the unbiased pass@1 from K
samples is the fraction solved), so it is one column, and the output says so. It says which
prompt the model got (format, system prompt, instruction, the first prompt as the model reads it)
and which answer extractor read the responses, and counts greedy responses where no answer was
found apart from wrong answers (evals.prompt_report): a base model's accuracy before RL.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reinforge.config import Config, ConfigError, dump_config
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run.env_factory import build_env, check_env_config
from reinforge.run.pipeline import closing_env
from reinforge.envs.single_turn import PromptFormatError
from reinforge.runtime.process_settings import configure_process
from reinforge.trainer.rl_loop import episode_token_budget
from reinforge.models.loading import ModelLoadError, check_model_dir, load_model_and_tokenizer
from reinforge.models.model_source import resolve_model_path
from reinforge.run.preflight import check_device
from reinforge.tasks.registry import check_task_config, load_tasks
from reinforge.evals.eval_metrics import summarize
from reinforge.evals.prompt_report import answer_counts, counts_line, prompt_lines, prompt_settings
from reinforge.run.task_fit import check_prompt_sizes, model_context, run_tokenizer
from reinforge.tasks.task import TaskSplits
from reinforge.evals.evaluation import evaluate, verifier_pool
from reinforge.evals.value_voting import voting_metrics
from reinforge.values.value_heads import success_head_for_eval


MEAN_IS_PASS_1 = "mean@{k} (the fraction of the {k} samples that solve a task) is also the unbiased pass@1 estimate, so it is printed once"


def default_k_values(samples: int) -> list[int]:
    """pass@k reported for k = 2, 4, ... and k = samples (a column per k up to 16 is noise); k = 1
    is mean@samples itself (eval_metrics.per_task_scores)."""
    if samples < 2:
        return []
    ks = {samples}
    k = 2
    while k < samples:
        ks.add(k)
        k *= 2
    return sorted(ks)


def default_output_dir() -> Path:
    return Path("runs") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}"


def check_eval_config(cfg: Config, output: Path) -> None:
    """What can fail before loading the model: the task section, the model path, the output."""
    check_task_config(cfg.task)
    check_env_config(cfg)
    check_device(cfg)
    if cfg.model.path is None:
        raise ConfigError("model.path: reinforge eval needs --model: a Hugging Face model directory, Hub id, .gguf file or fetched model name")
    try:
        check_model_dir(cfg.model.path)
    except ModelLoadError as err:
        raise ConfigError(f"model.path: {err}") from None
    if output.exists() and any(output.iterdir()):
        raise ConfigError(f"--output {output} already holds files; choose a new directory")


def format_metric(metric: dict[str, float], terminal: bool = False) -> str:
    """`43.8% [18.8, 68.8]`: the value and its CI bounds, in percent. On the terminal the CI goes
    on a second line (`43.8%` / `18.8-68.8`) so that five metric columns fit in 80 characters."""
    if math.isnan(metric["value"]):
        return "-"
    low, high = 100 * metric["ci_low"], 100 * metric["ci_high"]
    if terminal:
        return f"{metric['value']:.1%}\n[dim]{low:.1f}-{high:.1f}[/dim]"
    return f"{metric['value']:.1%} [{low:.1f}, {high:.1f}]"


def report_rows(summary: dict[str, Any], terminal: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the report table: `overall`, then one row per family."""
    names = list(summary["overall"])
    header = ["group", "tasks", *names]
    groups = [("overall", summary["tasks"], summary["overall"])]
    groups += [(family, entry["tasks"], entry["metrics"]) for family, entry in summary["families"].items()]
    rows = [[name, str(tasks), *(format_metric(metrics[n], terminal) for n in names)] for name, tasks, metrics in groups]
    return header, rows


def render_markdown(summary: dict[str, Any], settings: dict[str, Any]) -> str:
    header, rows = report_rows(summary)
    lines = [
        "# reinforge eval",
        "",
        f"- model: `{settings['model']}`",
        f"- tasks: {summary['tasks']} held-out ({settings['task_source']}), seed {settings['seed']}",
        (f"- greedy, and {summary['samples']} samples per task at temperature {settings['temperature']}, " if summary["samples"]
         else "- greedy only, ") + f"max {settings['max_new_tokens']} new tokens",
        f"- brackets: {summary['ci_level']:.0%} percentile-bootstrap CI over tasks, in percent",
        *([f"- {MEAN_IS_PASS_1.format(k=summary['samples'])}"] if summary["samples"] else []),
        f"- config: {settings['config_source']}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]
    return "\n".join(lines)


def print_report(summary: dict[str, Any], console: Console | None = None) -> None:
    header, rows = report_rows(summary, terminal=True)
    table = Table(title=f"reinforge eval ({summary['ci_level']:.0%} bootstrap CI)", header_style="bold")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for name, *cells in rows:
        table.add_row(escape(name), *cells)  # a JSONL family name may contain [brackets]
    (console or Console()).print(table)


def run_eval(
    cfg: Config, output: Path | None = None, k_values: Sequence[int] | None = None, config_source: str = "given config",
    samples: int | None = None,
) -> dict[str, Any]:
    """Evaluate `cfg.model.path` on the held-out tasks of `cfg.task`; returns what eval.json holds.
    `config_source` says where `cfg` came from; it is printed first and kept in the report.
    `samples`: sampled completions per task (default cfg.eval.samples; 0: greedy only)."""
    if samples is not None and samples < 0:
        raise ConfigError(f"--samples {samples}: give 0 (greedy only) or more sampled completions per task")
    out = output or default_output_dir()
    check_eval_config(cfg, out)
    Console().print(f"config: {escape(config_source)}", highlight=False)
    torch.manual_seed(cfg.trainer.seed)
    configure_process(cfg.trainer.threads, cfg.trainer.cpus, cfg.trainer.retain_freed_memory)

    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed).eval
    if not tasks:
        raise ConfigError(f"task source {cfg.task.source!r} produced no held-out tasks; raise task.eval_size")
    # With the tokenizer alone, before the weights load: a chat format without a chat template, a
    # chat prompt (a system prompt) under raw format, a prompt longer than the context.
    check_prompt_sizes(tasks, cfg, build_env(cfg, run_tokenizer(cfg, TaskSplits([], tasks))), model_context(cfg))
    model, tokenizer = load_model_and_tokenizer(cfg.model.path)
    model = model.to(cfg.model.device)
    env = build_env(cfg, tokenizer)
    try:
        prompting = prompt_settings(cfg, env, tasks)
    except PromptFormatError as err:
        raise ConfigError(f"rollout.prompt_format: {err}") from None
    console = Console(highlight=False)
    for line in prompt_lines(prompting):
        console.print(escape(line))
    if prompting["first_prompt"] is not None:
        console.print(f"first prompt, as the model reads it: {escape(repr(prompting['first_prompt']))}")
    engine = TorchEngine(model.eval(), tokenizer.pad_token_id, dtype=cfg.rollout.engine_dtype)
    samples = cfg.eval.samples if samples is None else samples
    max_new_tokens = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    start = time.perf_counter()
    with closing_env(env), verifier_pool(cfg.reward.workers, cfg.reward.timeout_s, cfg.reward.isolation) as verify:
        metrics, records = evaluate(
            engine, env, tasks, max_new_tokens, samples, cfg.rollout.temperature, seed=cfg.trainer.seed,
            max_episode_tokens=episode_token_budget(cfg, model), verify=verify,
            score_samples=success_head_for_eval(cfg, resolve_model_path(cfg.model.path), model),  # None unless the run trained one
        )
    seconds = time.perf_counter() - start

    summary = summarize(records, default_k_values(samples) if k_values is None else k_values, seed=cfg.trainer.seed)
    settings = {
        "model": str(cfg.model.path),
        "task_source": cfg.task.source,
        "seed": cfg.trainer.seed,
        "temperature": cfg.rollout.temperature,
        "max_new_tokens": max_new_tokens,
        "config_source": config_source,
    }
    report = {**settings, "task": cfg.task.model_dump(mode="json"), "seconds": seconds, "metrics": metrics, **summary}
    report["prompting"] = prompting
    counts = answer_counts(records)
    if counts is not None:
        report["answers"] = counts
    voting = voting_metrics(records)  # majority / best-of-n / weighted voting by the success head, when there is one
    if voting:
        report["voting"] = voting

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(dump_config(cfg))
    (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    games = any(key.startswith("game/vs-") for key in metrics)  # a game run: win / draw / loss per opponent
    if games:
        from reinforge.games.eval_report import games_markdown, print_games
    prompt_md = "\n".join(f"- {line}" for line in [*prompt_lines(prompting), *([counts_line(counts)] if counts else [])])
    (out / "eval.md").write_text(
        render_markdown(summary, settings) + "\n" + prompt_md + "\n" + ("\n" + games_markdown(metrics) if games else "")
    )
    with open(out / "eval_records.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")

    print_report(summary)
    if games:
        print_games(metrics)
    if counts is not None:
        console.print(counts_line(counts))
    if summary["samples"]:
        console.print(MEAN_IS_PASS_1.format(k=summary["samples"]))
    if voting:
        console.print("voting over the samples: " + ", ".join(f"{name} {value:.1%}" for name, value in voting.items()))
    console.print(f"{summary['tasks']} tasks in {seconds:.1f} s; report in {out}")
    return report
