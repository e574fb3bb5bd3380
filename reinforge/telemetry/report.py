"""`reinforge report RUN_DIR`: one self-contained HTML page that shows what a run did.

It reads only the run directory (config.yaml, metrics.jsonl, samples.jsonl, eval_samples.jsonl),
inlines every plot as SVG and every trajectory as escaped text, and uses a few lines of plain
JavaScript for the trajectory browser: the file opens offline and makes no network request.
"""

from __future__ import annotations

import html
import random
import re
from pathlib import Path
from typing import Any

import yaml

from reinforge.telemetry.jsonl_sink import read_jsonl_metrics
from reinforge.telemetry.report_monitors import monitor_charts, monitor_summary
from reinforge.telemetry.report_plots import line_chart, reliability_chart, time_chart
from reinforge.telemetry.summary import logged_sft_seconds, run_time_rows
from reinforge.telemetry.reward_failures import describe_reward_failures, reward_failure_totals

RL_PHASES = ("rollout", "reward", "prepare", "update")  # each `rl` record's time/<phase>; eval has its own records
PICKS = ("best", "worst", "random")
esc = html.escape


def read_records(path: Path) -> list[dict[str, Any]]:
    return read_jsonl_metrics(path) if path.exists() else []


def series(rows: list[dict], stage: str, key: str) -> list[tuple[float, float]]:
    return [(r["step"], r[key]) for r in rows if r.get("stage") == stage and isinstance(r.get(key), (int, float))]


def metric_keys(rows: list[dict], stage: str) -> list[str]:
    return list(dict.fromkeys(k for r in rows if r.get("stage") == stage for k in r))


def phase_seconds(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Per-step seconds of each phase, as the run logged them: `time/<phase>` of each `rl` record and
    `time/eval` of each `eval` record, the evaluation before the first step included (at step 0).
    These are the numbers the console summary adds up, so the two agree."""
    phases = {p: series(rows, "rl", f"time/{p}") for p in RL_PHASES}
    if not any(phases.values()):  # runs from before per-phase metrics: the whole step, undivided
        phases["step"] = series(rows, "rl", "step_seconds")
    # Runs from before `time/eval` was logged: the gap between a step's `rl` record and the `eval`
    # record logged right after it (the step-0 evaluation, with no `rl` record before it, is lost).
    phases["eval"] = series(rows, "eval", "time/eval") or [
        (cur["step"], cur["time"] - prev["time"])
        for prev, cur in zip(rows, rows[1:])
        if cur.get("stage") == "eval" and prev.get("stage") == "rl" and prev.get("step") == cur.get("step")
    ]
    return phases


def sft_steps(rows: list[dict], planned: int | None) -> str:
    """Warm-up steps taken, from the step numbers logged (every 10th step and the last; they count
    from 0), against `sft.steps` of the run's config when known."""
    logged = [r["step"] for r in rows if r.get("stage") == "sft"]
    done = max(logged) + 1 if logged else 0
    if planned is None or done == planned:
        return str(done)
    if done < planned:  # the last step is always logged: the warm-up did not finish
        return f"at least {done} of {planned} (the warm-up stopped early)"
    return f"{done} (config says sft.steps={planned})"


def plots(rows: list[dict]) -> list[str]:
    rl_keys, eval_keys = metric_keys(rows, "rl"), metric_keys(rows, "eval")
    parts = [k for k in rl_keys if k.startswith("reward/") and k.endswith("/mean")]
    rewards = {"reward (total)": series(rows, "rl", "reward")}
    rewards.update({k.split("/")[1]: series(rows, "rl", k) for k in parts})
    held_out = {k: series(rows, "eval", k) for k in ["accuracy"] + [k for k in eval_keys if k.startswith("mean@")]}
    # Several distinct policies in one run (the top-level `policies:` section): one line per policy.
    policies = [k.split("/")[1] for k in rl_keys if k.startswith("policy/") and k.endswith("/reward") and k.count("/") == 2]
    charts = [
        line_chart("Reward, with each named part", rewards, "reward", "reward"),
        line_chart("Held-out accuracy", held_out, "accuracy", "heldout"),
        line_chart("Reward per policy", {p: series(rows, "rl", f"policy/{p}/reward") for p in policies}, "reward", "policyreward"),
        line_chart("Held-out not-lost rate per policy", {p: series(rows, "eval", f"policy/{p}/accuracy") for p in policies},
                   "rate", "policyheldout"),
        line_chart("Games: not lost (win + draw) against each fixed opponent", {
            k.split("/")[1]: series(rows, "eval", k) for k in eval_keys if k.startswith("game/vs-") and k.count("/") == 2 and k.endswith("/win_draw")
        }, "rate", "games"),
        line_chart("Games: rating of each checkpoint (OpenSkill mu, fixed opponents as anchors)", {
            "policy (mu)": series(rows, "eval", "rating/mu"),
            "policy (mu - 3 sigma)": series(rows, "eval", "rating/ordinal"),
            **{k.split("/")[2]: series(rows, "eval", k) for k in eval_keys if k.startswith("rating/anchor/")},
        }, "rating", "rating"),
        line_chart("KL to the reference policy", {"kl_ref": series(rows, "rl", "kl_ref")}, "KL", "kl"),
        line_chart("Engine vs learner log-prob gap", {
            "mean |Δ log-prob|": series(rows, "rl", "logprob_gap/abs_mean"),
            "max |Δ log-prob|": series(rows, "rl", "logprob_gap/abs_max"),
        }, "nats / sampled token", "gap", log_y=True),  # fp32 ~1e-7, bf16 ~1e-2: decades apart
        line_chart("Importance ratio learner / engine", {
            "mean": series(rows, "rl", "logprob_gap/ratio_mean"),
            "min": series(rows, "rl", "logprob_gap/ratio_min"),
            "max": series(rows, "rl", "logprob_gap/ratio_max"),
        }, "ratio", "gapratio"),
        line_chart("Policy entropy", {"entropy": series(rows, "rl", "entropy")}, "nats / token", "entropy"),
        line_chart("Response length", {"response_length": series(rows, "rl", "response_length")}, "tokens", "length"),
        line_chart("Tool-call rate", {"tool_call_rate": series(rows, "rl", "tool_call_rate")}, "rate", "tools"),
        line_chart("Supervised warm-up loss", {"loss": series(rows, "sft", "loss")}, "loss", "sft", "SFT step"),
        time_chart(phase_seconds(rows), "time"),
        line_chart("Prompt-value model: Brier score", {
            "value model": series(rows, "rl", "value/brier"),
            "batch pass rate as a constant": series(rows, "rl", "value/brier_constant"),
        }, "Brier score", "brier"),
        reliability_chart(reliability_points(rows), "reliability"),
        *monitor_charts(rows),  # training-health monitors: when each fired, and what it watched
    ]
    return [c for c in charts if c is not None]


def reliability_points(rows: list[dict]) -> list[tuple[float, float, float]]:
    """The reliability curve logged at the last step (its counts are cumulative over the run)."""
    last = next((r for r in reversed(rows) if r.get("stage") == "rl" and "value/brier" in r), None)
    if last is None:
        return []
    bins = sorted(int(k.rsplit("_", 1)[1]) for k in last if k.startswith("value/reliability/n_"))
    return [(last[f"value/reliability/pred_{b}"], last[f"value/reliability/obs_{b}"], last[f"value/reliability/n_{b}"]) for b in bins]


def last_row_per_step(rows: list[dict], stage: str) -> list[dict]:
    """One row per step (a resumed run may log a step twice: the later one counts)."""
    return list({r["step"]: r for r in rows if r.get("stage") == stage}.values())


def header(run_dir: Path, rows: list[dict], config: dict[str, Any]) -> str:
    rl_steps = len({r["step"] for r in rows if r.get("stage") == "rl"})  # distinct: a resumed run may log a step twice
    sft = config.get("sft")
    planned_sft = sft.get("steps") if isinstance(sft, dict) else None
    acc = series(rows, "eval", "accuracy")
    phases = {phase: sum(s for _, s in points) for phase, points in phase_seconds(rows).items()}
    times = run_time_rows(logged_sft_seconds(rows), phases)  # the console summary's rows, from the same log
    facts = [
        ("run directory", str(run_dir)),
        ("RL steps", str(rl_steps)),
        ("SFT steps", sft_steps(rows, planned_sft if isinstance(planned_sft, int) else None)),
        ("held-out accuracy", f"{acc[0][1]:.3f} (step {acc[0][0]}) → {acc[-1][1]:.3f} (step {acc[-1][0]})" if acc else "not evaluated"),
        ("time in RL steps and evaluation", f"{sum(phases.values()):.1f} s"),
        *[(f"time: {phase}", spent) for phase, spent in times],
        ("reward failures", describe_reward_failures(reward_failure_totals(last_row_per_step(rows, "rl")))),
        ("training-health monitors", monitor_summary(rows)),
    ]
    final = f"{acc[-1][1]:.3f}" if acc else "—"
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    return f'<header><h1>reinforge run report</h1><p class="final">final held-out accuracy <b>{esc(final)}</b></p><table class="facts">{cells}</table></header>'


def pick(records: list[dict], score, rng: random.Random) -> dict[str, dict]:
    """Best and worst by `score` (first one wins ties) and one seeded-random record."""
    if not records:
        return {}
    ranked = sorted(records, key=score)  # stable: ties keep file order
    return {"best": max(records, key=score), "worst": ranked[0], "random": rng.choice(records)}


def text_block(text: Any, css: str = "text") -> str:
    if isinstance(text, list):  # chat-style prompt: [{"role", "content"}, ...]
        text = "\n".join(f"[{m.get('role', '?')}] {m.get('content', '')}" if isinstance(m, dict) else str(m) for m in text)
    return f'<pre class="{css}">{esc(str(text))}</pre>'


# Hermes-style tags, and the compact <<name: args>> syntax of reinforge's tool env.
TOOL_CALL = re.compile(r"(<(tool_call|tool|function_call)\b[^>]*>.*?</\2>|<<[^<>]*>>)", re.S)


def policy_text(text: str) -> str:
    """The policy's text with tool-call spans (`<tool_call>...</tool_call>` and the like) marked."""
    out, end = [], 0
    for call in TOOL_CALL.finditer(text):
        out.append(f'{esc(text[end : call.start()])}<span class="tool-call">{esc(call.group(0))}</span>')
        end = call.end()
    return f'<pre class="text">{"".join(out)}{esc(text[end:])}</pre>'


def turns_block(turns: list[dict]) -> str:
    out = []
    for turn in turns:
        role, text = str(turn.get("role", "?")), str(turn.get("text", ""))
        kind = role if role in ("policy", "env", "tool") else "other"
        body = policy_text(text) if kind == "policy" else text_block(text)
        out.append(f'<div class="turn turn-{kind}"><span class="role">{esc(role)}</span>{body}</div>')
    return "".join(out)


def record_card(record: dict, kind: str, label: str) -> str:
    if kind == "train":
        parts = ", ".join(f"{esc(str(k))} {v:.3g}" if isinstance(v, (int, float)) else f"{esc(str(k))} {esc(str(v))}"
                          for k, v in (record.get("rewards") or {}).items())
        reward = record.get("reward")
        reward = f"{reward:.3g}" if isinstance(reward, (int, float)) else str(reward)
        meta = (f"step {record.get('step')} · task {record.get('task_id')} · reward {reward}"
                f" · {record.get('finish_reason')} · {record.get('num_tokens')} tokens · policy v{record.get('policy_version')}")
        body_key, body_label = "response", "response"
    else:
        parts = ""
        meta = f"step {record.get('step')} · task {record.get('task_id')} · {'correct' if record.get('correct') else 'wrong'} · answer {record.get('answer')}"
        body_key, body_label = "greedy", "greedy response"
    out = [f'<div class="card {kind}"><h4>{esc(label)}</h4><p class="meta">{esc(meta)}</p>']
    if parts:
        out.append(f'<p class="meta">reward parts: {parts}</p>')
    if record.get("errors"):
        out.append(f'<p class="errors">errors: {esc(str(record["errors"]))}</p>')
    if "prompt" in record:
        out.append(f'<div class="label">prompt</div>{text_block(record["prompt"], "text prompt")}')
    if record.get("turns"):
        out.append(f'<div class="label">episode, turn by turn</div>{turns_block(record["turns"])}')
    else:
        out.append(f'<div class="label">{body_label}</div>{text_block(record.get(body_key, ""))}')
    return "".join(out) + "</div>"


def browser(rows: list[dict], samples: list[dict], eval_samples: list[dict], seed: int) -> str:
    """A step selector and best / worst / random buttons over pre-rendered, hidden views."""
    steps = sorted({r["step"] for r in eval_samples} | {s for s, _ in series(rows, "eval", "accuracy")})
    steps = steps or sorted({r["step"] for r in samples})
    if not steps:
        return "<p>No trajectories were recorded in this run.</p>"
    nearest = lambda s: min(steps, key=lambda e: (abs(e - s), e))  # noqa: E731
    accuracy = dict(series(rows, "eval", "accuracy"))
    options, views = [], []
    for step in steps:
        acc = f" · held-out accuracy {accuracy[step]:.3f}" if step in accuracy else ""
        selected = " selected" if step == steps[-1] else ""
        options.append(f'<option value="{step}"{selected}>step {step}{esc(acc)}</option>')
        rng = random.Random(seed * 1_000_003 + step)
        train = pick([r for r in samples if nearest(r["step"]) == step], lambda r: r.get("reward") or 0.0, rng)
        held = pick([r for r in eval_samples if r["step"] == step], lambda r: bool(r.get("correct")), rng)
        for name in PICKS:
            cols = [record_card(train[name], "train", f"training rollout ({name} reward)") if train else
                    '<div class="card empty">no training samples near this step</div>',
                    record_card(held[name], "eval", f"held-out task ({name})") if held else
                    '<div class="card empty">no held-out records at this step</div>']
            hidden = "" if (step == steps[-1] and name == "best") else " hidden"
            views.append(f'<div class="view" data-step="{step}" data-pick="{name}"{hidden}>{"".join(cols)}</div>')
    buttons = "".join(f'<button type="button" class="pick{" active" if n == "best" else ""}" data-pick="{n}">{n}</button>' for n in PICKS)
    return (f'<div class="controls"><label>evaluation step <select id="step-select">{"".join(options)}</select></label>'
            f'<span class="picks">{buttons}</span></div>{"".join(views)}')


SCRIPT = """
const select = document.getElementById('step-select');
let pick = 'best';
function show() {
  document.querySelectorAll('.view').forEach(v => { v.hidden = !(v.dataset.step === select.value && v.dataset.pick === pick); });
  document.querySelectorAll('button.pick').forEach(b => b.classList.toggle('active', b.dataset.pick === pick));
}
if (select) {
  select.addEventListener('change', show);
  document.querySelectorAll('button.pick').forEach(b => b.addEventListener('click', () => { pick = b.dataset.pick; show(); }));
  show();
}
"""

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d232b; background: #f4f6f8; margin: 0; }
main { max-width: 1280px; margin: 0 auto; padding: 20px 28px 48px; }
h1 { margin: 0 0 4px; font-size: 26px; } h2 { margin: 32px 0 12px; font-size: 20px; border-bottom: 2px solid #d7dde3; padding-bottom: 4px; }
.final { font-size: 18px; margin: 4px 0 10px; } .final b { color: #1a7f37; }
.facts th { text-align: left; font-weight: 600; padding: 2px 18px 2px 0; color: #4a5560; } .facts td { font-family: ui-monospace, monospace; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 14px; }
.plot, .card { background: #fff; border: 1px solid #d7dde3; border-radius: 8px; padding: 10px 12px; }
.plot svg { width: 100%; height: auto; display: block; }
.controls { display: flex; gap: 18px; align-items: center; margin-bottom: 12px; flex-wrap: wrap; }
select, button { font: inherit; padding: 4px 10px; border: 1px solid #9aa5b1; border-radius: 6px; background: #fff; cursor: pointer; }
button.pick { margin-right: 4px; } button.pick.active { background: #1f6feb; border-color: #1f6feb; color: #fff; }
.view { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; align-items: start; } .view[hidden] { display: none; }
.card h4 { margin: 0 0 4px; } .card.train h4 { color: #1f6feb; } .card.eval h4 { color: #8250df; } .card.empty { color: #6a737d; font-style: italic; }
.meta { margin: 2px 0; color: #4a5560; font-size: 13px; } .errors { color: #b42318; font-weight: 600; }
.label { margin-top: 8px; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: #6a737d; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; padding: 8px 10px; border-radius: 6px; background: #f6f8fa; font: 13px/1.4 ui-monospace, monospace; }
pre.prompt { background: #eef2f6; }
.turn { margin: 6px 0; padding-left: 10px; border-left: 4px solid #9aa5b1; } .turn .role { font-size: 12px; font-weight: 700; text-transform: uppercase; }
.turn-policy { border-color: #1f6feb; } .turn-policy .role { color: #1f6feb; }
.turn-env { border-color: #6a737d; } .turn-env .role { color: #4a5560; }
.tool-call { background: #fff1c2; border: 1px dashed #d4a72c; border-radius: 4px; padding: 0 3px; }
.turn-tool { border-color: #d4a72c; } .turn-tool .role { color: #9a6700; } .turn-tool pre { background: #fff8e1; border: 1px dashed #d4a72c; }
pre.config { background: #fff; border: 1px solid #d7dde3; }
"""


def write_report(run_dir: Path, output: Path | None = None) -> Path:
    """Writes the report (default `run_dir/report.html`) and returns its path."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.exists():
        raise FileNotFoundError(f"{metrics_path} not found: is {run_dir} a reinforge run directory?")
    rows = read_records(metrics_path)
    config_path = run_dir / "config.yaml"
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else "(no config.yaml)"
    try:
        config = yaml.safe_load(config_text) if config_path.exists() else {}
    except yaml.YAMLError:
        config = {}
    config = config if isinstance(config, dict) else {}
    try:
        seed = int((config.get("trainer") or {}).get("seed", 0))
    except (AttributeError, TypeError, ValueError):
        seed = 0
    samples, eval_samples = read_records(run_dir / "samples.jsonl"), read_records(run_dir / "eval_samples.jsonl")
    figures = "".join(f'<div class="plot">{svg}</div>' for svg in plots(rows))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>reinforge report: {esc(run_dir.name)}</title><style>{STYLE}</style></head>
<body><main>
{header(run_dir, rows, config)}
<h2>Curves</h2><div class="plots">{figures}</div>
<h2>Trajectories</h2>{browser(rows, samples, eval_samples, seed)}
<h2>Config</h2><pre class="config">{esc(config_text)}</pre>
</main><script>{SCRIPT}</script></body></html>
"""
    output = Path(output) if output is not None else run_dir / "report.html"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    return output
