"""Checkpoints of `reinforge train` with workers.learners=2 workers.sharding=fsdp: every rank writes
its shards through torch.distributed.checkpoint into the checkpoint's sharded/ (no rank gathers the
optimizer state), a run SIGKILLed and resumed is the uninterrupted run bit for bit, a resume on
another number of ranks reshards and says so, and a damaged shard is named before anything loads.

Every run is a process of its own: a process that ran FSDP2 as rank 0 keeps a gloo socket
listening on every interface, which the Ray loopback test would find in pytest's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from deadlines import PROCESS_START_S
from reinforge.cli import main
from reinforge.distributed.sharded_checkpoint import SHARDED_DIR, load_shards, save_shards, sharded_entry
from reinforge.runtime import checkpoint as ckpt
from reinforge.runtime.run_errors import CheckpointError
from run_records import assert_same_run, copy_at_first_checkpoint, final_weights, run_metrics

BASE = [
    "model.preset=nano", "task.train_size=100", "task.eval_size=4", "eval.every=100", "eval.samples=1", "sft.steps=150", "sft.lr=0.003",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8", "trainer.steps=3",
    "trainer.checkpoint_every=2", "telemetry.progress=false", "telemetry.tensorboard=false",
    "workers.learners=2", "workers.sharding=fsdp", f"workers.timeout_s={PROCESS_START_S:g}",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def command(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from reinforge.cli import main; sys.exit(main(sys.argv[1:]))", "train", *args]


def train(*args: str) -> str:
    """`reinforge train` to its end; its stdout."""
    done = subprocess.run(command(*args), env=ENV, capture_output=True, text=True, timeout=3 * PROCESS_START_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


def trained_tiny(lr: float, seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # saved by one process here, by every rank in a run
def test_a_plain_learner_reads_the_shards_alone_and_keeps_its_hyperparameters(tmp_path: Path) -> None:
    # One process, no process group: what a resume with workers.sharding=none does.
    model, optimizer = trained_tiny(lr=1e-3)
    save_shards({"policy": (model, optimizer)}, tmp_path / SHARDED_DIR)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    restored = torch.optim.AdamW(fresh.parameters(), lr=5e-4)  # the config's new rate (--force algo.lr)
    load_shards(fresh, restored, {**sharded_entry("policy", 1), ckpt.PART: tmp_path / SHARDED_DIR}, alone=True)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    saved, loaded = optimizer.state_dict(), restored.state_dict()
    assert saved["state"].keys() == loaded["state"].keys()
    assert all(torch.equal(saved["state"][i][k], loaded["state"][i][k]) for i in saved["state"] for k in saved["state"][i])
    assert restored.param_groups[0]["lr"] == 5e-4


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # saved by one process here, by every rank in a run
def test_shards_damaged_after_the_manifest_check_are_one_clear_error(tmp_path: Path) -> None:
    model, optimizer = trained_tiny(lr=1e-3)
    directory = tmp_path / SHARDED_DIR
    save_shards({"policy": (model, optimizer)}, directory)
    shard = directory / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError) as err:
        load_shards(model, optimizer, {**sharded_entry("policy", 1), ckpt.PART: directory}, alone=True)
    assert str(err.value).startswith(f"cannot read the sharded learner state in {directory}: ") and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded") / "run"
    train("--output", str(out), *BASE)
    return out


def test_every_rank_writes_its_shards_into_the_checkpoint(reference: Path) -> None:
    rl = [r for r in run_metrics(reference) if r.get("stage") == "rl"]
    assert len(rl) == 3 and any(r["grad_norm"] > 0 for r in rl)  # a step with signal
    first = ckpt.list_checkpoints(reference)[0]
    state = ckpt.load_state(first)
    assert state["learner_version"] == 2
    # state.pt holds no optimizer tensors, only where the shards are and how many ranks wrote them.
    assert state["optimizer"] == {ckpt.PART: first / SHARDED_DIR, "key": "policy", "world_size": 2}
    shards = sorted(p.name for p in (first / SHARDED_DIR).iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    # Together the ranks' files hold the weights and both AdamW moments (3x the weights' bytes);
    # each rank's, about half of that: well under 3/4 (one rank with everything would hold it all).
    whole = 3 * (first / "model" / "model.safetensors").stat().st_size
    per_rank = [(first / SHARDED_DIR / name).stat().st_size for name in shards[1:]]
    assert sum(per_rank) >= whole and all(size < 0.75 * whole for size in per_rank)
    # The manifest covers the shards: verified, renamed and pruned with the rest of the checkpoint.
    manifest = (first / ckpt.MANIFEST).read_text()
    assert all(f"{SHARDED_DIR}/{name}" in manifest for name in shards)
    final = AutoModelForCausalLM.from_pretrained(reference / "final").state_dict()  # a plain Hugging Face model
    saved = final_weights(reference)
    assert all(torch.equal(final[k], saved[k]) for k in saved)


@pytest.mark.slow  # whole sharded runs resumed; .ci/run runs tests/distributed -m slow
def test_sigkill_of_every_rank_then_resume_is_the_uninterrupted_run(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "run"
    # Rank 0 and its followers in a session of their own: the kill takes every rank at once, as a lost node would.
    process = subprocess.Popen(command("--output", str(out), *BASE), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    landed = out / "checkpoints" / "step_000002"
    deadline = time.monotonic() + 3 * PROCESS_START_S
    while not landed.exists():
        assert process.poll() is None, f"the run ended before {landed} appeared: {process.communicate()}"
        assert time.monotonic() < deadline, f"{landed} did not appear"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    assert not (out / "final").exists()  # killed mid-run, during step 3
    stdout = train("--resume", str(out))
    assert "resuming" in stdout and "resharding" not in stdout
    assert_same_run(out, reference)


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow  # whole sharded runs resumed; .ci/run runs tests/distributed -m slow
@pytest.mark.parametrize("ranks", [["workers.learners=3"], ["workers.learners=1", "workers.sharding=none"]], ids=["3-ranks", "unsharded"])
def test_a_resume_on_other_ranks_reshards_and_continues(tmp_path: Path, reference: Path, ranks: list[str]) -> None:
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)
    stdout = train("--resume", str(copy), "--force", *ranks)
    [note] = [line for line in stdout.splitlines() if "resharding" in line]
    onto = "3 ranks" if ranks == ["workers.learners=3"] else "one process (workers.sharding=none)"
    assert note == f"reinforge: resharding the learner state in {copy / 'checkpoints' / 'step_000002' / SHARDED_DIR} from 2 FSDP ranks to {onto}"
    # Step 3 from the restored moments: the same update as the 2-rank run's up to rounding (other
    # ranks add in another order). The baseline is the step's update itself: AdamW without the
    # restored moments and step count moves each weight by ~lr, as large as the whole update.
    step_2 = load_file(ckpt.list_checkpoints(reference)[0] / "model" / "model.safetensors")
    update = largest_difference(final_weights(reference), step_2)
    lr = yaml.safe_load((reference / "config.yaml").read_text())["algo"]["lr"]
    assert update > lr / 2
    assert largest_difference(final_weights(copy), final_weights(reference)) < update / 100
    assert [r["step"] for r in run_metrics(copy) if r.get("stage") == "rl"] == [1, 2, 3]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_damaged_shard_is_named(tmp_path: Path, reference: Path, damage: str, capsys) -> None:
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)
    shard = ckpt.list_checkpoints(copy)[0] / SHARDED_DIR / ("__1_0.distcp" if damage == "missing" else ".metadata")
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:-10] + b"corrupted!")
    assert main(["train", "--resume", str(copy)]) == 2  # refused before any model or rank starts
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(shard) in err and damage in err
