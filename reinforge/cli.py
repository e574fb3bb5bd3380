"""`reinforge train | sft | compare`: run a recipe, with dotted overrides (`algo.lr=1e-5`)."""

from __future__ import annotations

import argparse
import sys

from reinforge.config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reinforge", description="RL post-training for language models.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("train", "supervised warm-up (if the recipe has one), then RL, with held-out evaluation"),
        ("sft", "the supervised warm-up stage on its own"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. algo.lr=1e-5")
        cmd.add_argument("--recipe", default="default", help="shipped recipe name or YAML path (default: default)")
        cmd.add_argument("--model", help="local Hugging Face model directory (skips the recipe's warm-up unless sft.steps is set)")
        cmd.add_argument("--output", help="run directory (default: runs/<timestamp>)")
    cmp = sub.add_parser("compare", help="run a recipe under several methods and seeds; plot and tabulate")
    cmp.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or YAML path")
    cmp.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides for every run")
    cmp.add_argument("--algos", required=True, help="comma-separated method names (reinforge.algos.methods)")
    cmp.add_argument("--seeds", type=int, default=3, help="seeds per method (default 3)")
    cmp.add_argument("--output", help="comparison directory (default: runs/compare-<timestamp>)")
    return parser


def config_from_args(args: argparse.Namespace):
    overrides = list(args.overrides)
    if args.model is not None:
        overrides.append(f"model.path={args.model}")
        if not any(o.startswith("sft.steps=") for o in overrides) and args.command == "train":
            overrides.append("sft.steps=0")
    if args.output is not None:
        overrides.append(f"trainer.output_dir={args.output}")
    return load_config(args.recipe, overrides)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = config_from_args(args) if args.command != "compare" else None
        # Imported only now, so that `--help` and config errors answer without loading torch.
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own display covers progress; no per-save bars
        if args.command == "compare":
            from pathlib import Path

            from reinforge.trainer.compare import compare

            if "=" in args.recipe:  # `compare key=value ...` with the default recipe
                args.overrides.insert(0, args.recipe)
                args.recipe = "default"
            methods = [m.strip() for m in args.algos.split(",") if m.strip()]
            compare(args.recipe, methods, args.seeds, list(args.overrides), Path(args.output) if args.output else None)
            return 0
        from reinforge.trainer.pipeline import run_sft_stage, run_training

        if args.command == "train":
            run_training(cfg)
        else:
            run_sft_stage(cfg)
    except ConfigError as err:
        print(f"reinforge: config error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
