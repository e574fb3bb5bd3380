"""Which pairs of features a run refuses before compute: every pair of FEATURES goes through the
checks `reinforge config validate` runs (the preflight and the task fit; no model is loaded).

A feature is the overrides that turn it on and the kinds of run (recipes) it is meant for: a pair
runs on the first recipe that both are meant for; two features meant for different kinds
of run (a tool agent is not a board game) are not a refusal, and are left out. vLLM is taken as installed
and able to serve the tiny model (only the combinations are in question here), and so is Ray.

`python -m tests.feature_matrix` prints the table that docs/architecture.md keeps, and `--write`
puts it there; the test (tests/test_feature_pairs.py) checks the two agree, so the list of refused
pairs stays true.
"""

from __future__ import annotations

import io
import itertools
import re
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from reinforge.config import ConfigError, load_config


GAME, POLICIES, TOOLS, GATEWAY = "tictactoe-selfplay", "describer-guesser", "tool-agent", "gateway-agent"


@dataclass(frozen=True)
class Feature:
    name: str
    recipes: tuple[str, ...] | None  # the kinds of run it is meant for, the first preferred; None: any
    overrides: tuple[str, ...]


FEATURES = (
    Feature("several policies", (POLICIES,), ()),
    Feature("self-play game", (GAME,), ()),
    Feature("opponent pool", (GAME,), ("task.params.opponent_pool={every: 2, size: 2}", "task.params.train_seats=[[policy, pool], [pool, policy]]")),
    Feature("multi-turn tools", (TOOLS,), ()),
    Feature("gateway agent", (GATEWAY,), ()),
    Feature("LoRA", None, ("model.lora={r: 4}",)),
    Feature("critic", None, ("critic.enabled=true", "algo.advantage=gae")),
    Feature("data-parallel learners", None, ("workers.learners=2",)),
    Feature("Ray rollout workers", None, ("workers.workers=1",)),
    Feature("Ray reward workers", None, ("workers.reward_workers=1",)),
    Feature("vLLM engine", None, ("engine.type=vllm",)),
    Feature("async schedule", None, ("trainer.schedule=async", "trainer.max_staleness=1", "algo.tis_cap=2.0")),
    Feature("partial rollouts", None, ("trainer.partial_rollouts=true", "trainer.max_staleness=1", "algo.tis_cap=2.0")),
    Feature("dynamic sampling", None, ("algo.dynamic_sampling=true",)),
    Feature("prompt-value curriculum", None, ("prompt_value.enabled=true", "prompt_value.curriculum=pcl")),
    Feature("success head pruning", None, ("success_head.enabled=true", "success_head.prune=true")),
    # SPA-RL (Wang et al. 2025) trains the policy with PPO on the per-step progress rewards: a critic and gae.
    Feature("turn progress (SPA)", (TOOLS,), ("progress.enabled=true", "critic.enabled=true", "algo.advantage=gae")),
    Feature("reference reset", None, ("algo.kl_coef=0.01", "algo.ref_reset_every=10")),
)


def pair_recipe(a: Feature, b: Feature) -> str | None:
    """The recipe a pair runs on, or None when the two are meant for different kinds of run."""
    meant = [f.recipes for f in (a, b) if f.recipes is not None] or [("default",)]
    both = [r for r in meant[0] if all(r in recipes for recipes in meant)]
    return both[0] if both else None


@contextmanager
def extras_installed():
    """vLLM and Ray count as installed: the question is which combinations run, not what this machine has."""
    with mock.patch("reinforge.engines.vllm_engine.vllm_available", return_value=True), \
            mock.patch("reinforge.engines.vllm_engine.unsupported_model_reason", return_value=None):
        yield


def refusal(recipe: str, overrides: tuple[str, ...]) -> str | None:
    """The ConfigError `config validate` gives for this config, or None when it passes."""
    from reinforge.run.preflight import preflight
    from reinforge.run.task_fit import check_tasks_fit
    from reinforge.tasks.registry import load_tasks

    try:  # quietly: the checks print their memory estimate and warnings
        cfg = load_config(recipe, list(overrides) + ["task.train_size=64", "task.eval_size=8"])
        with extras_installed(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            preflight(cfg)
            check_tasks_fit(cfg, load_tasks(cfg.task, seed=cfg.trainer.seed))
    except ConfigError as err:
        return str(err)
    return None


def alone_refusals() -> dict[str, str]:
    """Features refused on their own (a broken matrix, not a pair refusal)."""
    return {f.name: why for f in FEATURES if (why := refusal((f.recipes or ("default",))[0], f.overrides)) is not None}


def refused_pairs() -> tuple[int, list[tuple[str, str, str]]]:
    """(pairs tried, [(feature, feature, the refusal's first line)])."""
    tried, refused = 0, []
    for a, b in itertools.combinations(FEATURES, 2):
        recipe = pair_recipe(a, b)
        if recipe is None:
            continue
        tried += 1
        why = refusal(recipe, a.overrides + b.overrides)
        if why is not None:
            refused.append((a.name, b.name, why.splitlines()[0]))
    return tried, refused


def table(refused: list[tuple[str, str, str]]) -> str:
    rows = ["| feature | feature | why it is refused |", "|---|---|---|"]
    rows += [f"| {a} | {b} | {why.replace('|', '/')} |" for a, b, why in refused]
    return "\n".join(rows)


def write_doc(tried: int, refused: list[tuple[str, str, str]]) -> Path:
    """Replace the count and the table of docs/architecture.md's refused-pairs section."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
    head, section = doc.read_text().split("## Refused feature pairs", 1)
    section, *rest = section.split("\n## ", 1)
    section = re.sub(r"^Today: \d+ of the \d+ pairs", f"Today: {len(refused)} of the {tried} pairs", section, flags=re.MULTILINE)
    section = re.sub(r"^\|.*\|\n?", "", section, flags=re.MULTILINE).rstrip("\n") + "\n\n" + table(refused) + "\n"
    doc.write_text(head + "## Refused feature pairs" + section + ("\n## " + rest[0] if rest else ""))
    return doc


if __name__ == "__main__":
    broken = alone_refusals()
    for name, why in broken.items():
        print(f"refused on its own: {name}: {why}")
    tried, refused = refused_pairs()
    print(f"{len(refused)} of {tried} pairs refused ({len(FEATURES)} features)\n")
    print(table(refused))
    if "--write" in sys.argv[1:]:
        print(f"written to {write_doc(tried, refused)}")
