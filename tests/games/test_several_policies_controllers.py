"""Several policies with the adaptive controllers: each policy has its own adaptive KL coefficient
(algo.kl_ctrl=adaptive) and its own adaptive entropy coefficient (algo.adaptive_entropy), moved by
its own measurements only, and an exact resume restores both policies' controllers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reinforge.algos.kl_control import AdaptiveKLController
from reinforge.algos.losses.adaptive_entropy import AdaptiveEntropyCoef
from reinforge.run.pipeline import run_training
from reinforge.run.preflight import preflight
from run_records import copy_at_first_checkpoint, run_metrics
from test_several_policies import MICRO, config
from test_several_policies_parts import NAMES, checkpoint_state, rl_rows

KL_START, KL_TARGET, KL_HORIZON = 0.05, 1e-3, 20  # a short horizon: the coefficient moves up to 20% x n/20 a step
ENTROPY_START, ENTROPY_DELTA = 0.01, 0.004
CONTROLLERS = [
    f"algo.kl_coef={KL_START}", "algo.kl_ctrl=adaptive", f"algo.kl_target={KL_TARGET}", f"algo.kl_horizon={KL_HORIZON}",
    "algo.adaptive_entropy=true", f"algo.entropy_coef={ENTROPY_START}", f"algo.entropy_coef_delta={ENTROPY_DELTA}",
    "algo.entropy_target=50",  # above any entropy of the tiny vocabulary: the bonus is on from the second step
    "trainer.steps=4", "trainer.checkpoint_every=1", "trainer.keep_checkpoints=10",
]


def replayed_kl(rows: list[dict], name: str) -> list[float]:
    """The KL coefficients a controller fed only `name`'s own measured KL and sample counts uses, step by step."""
    controller, used = AdaptiveKLController(KL_START, KL_TARGET, KL_HORIZON), []
    for r in rows:
        used.append(controller.value)
        controller.update(r[f"policy/{name}/kl_ctrl/measured_kl"], int(r[f"policy/{name}/trajectories"]))
    return used


def replayed_entropy(rows: list[dict], name: str) -> list[float]:
    """The entropy coefficients after each step of a controller fed only `name`'s own entropy (one optimizer step a step)."""
    control, after = AdaptiveEntropyCoef(ENTROPY_START, 50.0, ENTROPY_DELTA), []
    for r in rows:
        control.observe(r[f"policy/{name}/entropy"], 1.0)
        control.end_step()
        after.append(control.coef)
    return after


def test_adaptive_controllers_are_accepted_for_several_policies() -> None:
    preflight(config("algo.kl_coef=0.01", "algo.kl_ctrl=adaptive"))
    preflight(config("algo.adaptive_entropy=true", "algo.entropy_coef=0.01"))


def test_each_policy_adapts_its_own_coefficients_and_a_resume_restores_both(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(config(*MICRO, *CONTROLLERS, f"trainer.output_dir={run_dir}"))
    rows = rl_rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert not any("kl_coef" in r or "entropy_coef" in r for r in rows)  # never unprefixed: each policy logs its own
    kl, entropy = {}, {}
    for name in NAMES:
        kl[name] = [r[f"policy/{name}/kl_coef"] for r in rows]
        entropy[name] = [r[f"policy/{name}/entropy_coef"] for r in rows]
        # A controller shared by the policies would also take the other policy's updates: twice the moves.
        assert kl[name] == pytest.approx(replayed_kl(rows, name), rel=1e-12), name
        assert entropy[name] == pytest.approx(replayed_entropy(rows, name), rel=1e-12), name
        assert len(set(kl[name])) == len(kl[name]), f"{name}'s KL coefficient did not move every step"
        assert entropy[name][-1] == pytest.approx(ENTROPY_START + 4 * ENTROPY_DELTA)
    assert kl["describer"] != kl["guesser"]  # their own measurements, their own coefficients

    state = checkpoint_state(run_dir, 2)["policies"]  # both controllers are in each checkpoint, as they stood
    for name in NAMES:
        assert state[name]["kl_control"]["value"] == pytest.approx(replayed_kl(rows[:3], name)[-1], rel=1e-12)
        assert state[name]["entropy_control"]["coef"] == entropy[name][1]

    copy = tmp_path / "copy"
    copy_at_first_checkpoint(run_dir, copy)
    run_training(config(*MICRO, *CONTROLLERS, f"trainer.output_dir={copy}"), resume=True)
    assert run_metrics(run_dir) == run_metrics(copy)  # the coefficients of steps 2-4 included
    for name in NAMES:
        a, b = (load_file(r / "final" / name / "model.safetensors") for r in (run_dir, copy))
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: resumed weights differ"
