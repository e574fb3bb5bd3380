"""The `monitor` config section: training-health detectors (reinforge.monitors) and what a firing does.

One sub-section per detector, each with `enabled` and its thresholds; the defaults stay quiet on
the default recipe's run (tests/monitors/test_quiet_on_default_run.py) and are tabled in
docs/running.md, 'Training-health monitors'. Kept out of schema.py because it is one idea.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reinforge.config.section import Section as _Section


class EntropyCollapseMonitor(_Section):
    enabled: bool = Field(True, description="Watch the policy's mean token entropy (`entropy`).")
    min_ratio: float = Field(
        0.1, gt=0, lt=1, description="Fires when the mean entropy of the last monitor.window steps falls below this fraction of its mean over the run's first monitor.window steps."
    )


class KlBlowupMonitor(_Section):
    enabled: bool = Field(True, description="Watch the KL to the reference policy (`kl_ref`; logged when algo.kl_coef > 0 or algo.ace_alpha > 0).")
    max_value: float = Field(1.0, gt=0, description="Fires when a step's kl_ref exceeds this (nats per token).")
    spike_factor: float = Field(
        5.0, gt=1, description="Also fires when a step's kl_ref exceeds this multiple of its median over the previous monitor.window steps (and monitor.kl_blowup.min_value)."
    )
    min_value: float = Field(0.05, ge=0, description="A kl_ref below this never counts as a spike (tiny values grow by large factors harmlessly).")


class LogprobGapBlowupMonitor(_Section):
    enabled: bool = Field(True, description="Watch the engine-learner log-prob gap (`logprob_gap/abs_mean`, every step).")
    max_value: float = Field(0.1, gt=0, description="Fires when a step's mean |engine - learner| log-prob exceeds this (nats per sampled token; an exact float32 engine measures ~1e-7, bf16 ~1e-3 to 1e-2).")
    spike_factor: float = Field(
        10.0, gt=1, description="Also fires when a step's gap exceeds this multiple of its median over the previous monitor.window steps (and monitor.logprob_gap_blowup.min_value)."
    )
    min_value: float = Field(0.01, ge=0, description="A gap below this never counts as a spike.")


class ClipSpikeMonitor(_Section):
    enabled: bool = Field(True, description="Watch the share of clipped tokens in the update (`clip_frac`).")
    max_value: float = Field(0.3, gt=0, le=1, description="Fires when a step's clip_frac exceeds this.")
    spike_factor: float = Field(
        3.0, gt=1, description="Also fires when a step's clip_frac exceeds this multiple of its median over the previous monitor.window steps (and monitor.clip_spike.min_value)."
    )
    min_value: float = Field(0.1, ge=0, le=1, description="A clip_frac below this never counts as a spike.")


class ResponseLengthMonitor(_Section):
    enabled: bool = Field(True, description="Watch the mean sampled tokens per response (`response_length`).")
    max_ratio: float = Field(
        4.0, gt=1, description="Fires (running away) when the mean length of the last monitor.window steps exceeds this multiple of its mean over the run's first monitor.window steps."
    )
    min_ratio: float = Field(0.25, gt=0, lt=1, description="Fires (collapsing) when that ratio falls below this.")


class RewardHackingMonitor(_Section):
    enabled: bool = Field(True, description="At each held-out evaluation, compare held-out greedy `accuracy` with the training `reward`.")
    min_accuracy_drop: float = Field(
        0.05, gt=0, le=1, description="Fires when held-out accuracy is this much (absolute) below its best earlier evaluation..."
    )
    min_reward_rise: float = Field(
        0.05, ge=0, description="...while the mean training reward of the monitor.window steps before this evaluation is at least this much above its mean around that best evaluation."
    )


class FormatHackingMonitor(_Section):
    enabled: bool = Field(True, description="Compare each reward component (`reward/<name>/mean`) with the verifier's over two consecutive monitor.window-step windows.")
    verifier: str | None = Field(
        None, description="Name of the reward component that checks correctness; default: the first component whose fn is verifier, code_tests or code_tests_difficulty (none: the detector is off)."
    )
    min_fall: float = Field(0.05, gt=0, description="Fires when the verifier's mean fell by at least this (last window vs the one before)...")
    min_rise: float = Field(0.05, gt=0, description="...while another component's mean rose by at least this.")


class ModeCollapseMonitor(_Section):
    enabled: bool = Field(True, description="Watch the share of groups whose responses are all the same tokens (`identical_response_group_frac`).")
    max_frac: float = Field(0.9, gt=0, le=1, description="Fires when that share, averaged over the last monitor.window steps, exceeds this.")


class ZeroVarianceMonitor(_Section):
    enabled: bool = Field(True, description="Watch the share of groups whose rewards are all equal (`sampled_zero_variance_group_frac`, else `zero_variance_group_frac`): they teach a group-relative estimator nothing.")
    max_frac: float = Field(0.9, gt=0, le=1, description="Fires when that share, averaged over the last monitor.window steps, exceeds this.")


class MonitorConfig(_Section):
    """Training-health monitors (reinforge.monitors): per-step detectors on the logged metrics, each
    logged as monitor/<name> (1 when it fires) and monitor/<name>/value, drawn in `reinforge report`."""

    enabled: bool = Field(True, description="Run the training-health detectors every RL step (one-policy runs); false turns them all off.")
    action: Literal["warn", "checkpoint", "stop"] = Field(
        "warn", description="What a detector's firing does (once, at the step it starts firing): warn = print one line saying what, the value, the threshold and what to try; checkpoint = warn and write a checkpoint (trainer.keep_checkpoints still rotates it out); stop = warn, evaluate, checkpoint and end the run (exit status 3; the reason is printed and logged as monitor/stop)."
    )
    window: int = Field(10, ge=2, description="Steps in each rolling window the detectors compare (recent vs the run's start, or vs the window before).")
    entropy_collapse: EntropyCollapseMonitor = Field(default_factory=EntropyCollapseMonitor, description="Policy entropy falling toward zero.")
    kl_blowup: KlBlowupMonitor = Field(default_factory=KlBlowupMonitor, description="KL to the reference policy jumping or exceeding a ceiling.")
    logprob_gap_blowup: LogprobGapBlowupMonitor = Field(default_factory=LogprobGapBlowupMonitor, description="The rollout engine's log-probs drifting from the learner's.")
    clip_spike: ClipSpikeMonitor = Field(default_factory=ClipSpikeMonitor, description="Spikes in the share of clipped tokens.")
    response_length: ResponseLengthMonitor = Field(default_factory=ResponseLengthMonitor, description="Response length running away or collapsing.")
    reward_hacking: RewardHackingMonitor = Field(default_factory=RewardHackingMonitor, description="Training reward rising while held-out accuracy falls.")
    format_hacking: FormatHackingMonitor = Field(default_factory=FormatHackingMonitor, description="One reward component rising while the verifier's falls.")
    mode_collapse: ModeCollapseMonitor = Field(default_factory=ModeCollapseMonitor, description="Groups whose responses are all identical.")
    zero_variance: ZeroVarianceMonitor = Field(default_factory=ZeroVarianceMonitor, description="Groups whose rewards are all equal.")
