"""SIGTERM in the middle of a rollout through the gateway: the run stops after the step with a
checkpoint, and its agent process and gateway port are gone (no process or port left behind)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
EXAMPLE = REPO / "examples" / "gateway_agent" / "agent.py"


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def listening_ports(pid: int) -> set[int]:
    """TCP ports `pid` listens on (from /proc/net/tcp and the process's socket inodes)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return set()
    inodes = {int(m.group(1)) for i in inodes if (m := re.match(r"socket:\[(\d+)\]", i))}
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[9]) in inodes:  # 0A: LISTEN
            ports.add(int(fields[1].split(":")[1], 16))
    return ports


@pytest.mark.slow
def test_sigterm_mid_rollout_leaves_no_agent_process_and_no_port(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "reinforge.cli", "train", "--output", str(out), "model.preset=nano", "sft.steps=0",
        "rollout.prompt_format=chat", "task.train_size=64", "task.eval_size=4", "eval.samples=1", "rollout.prompts_per_step=2",
        "rollout.group_size=2", "rollout.max_new_tokens=4", "trainer.steps=50", "env.type=gateway",
        f"env.agent={HERE / 'agents.py'}:slow_echo", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    agents, ports = [], set()
    while not (agents and ports):  # the agent process and the gateway are up: a rollout is running
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no rollout started"
        agents, ports = children(process.pid), listening_ports(process.pid)
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "--resume" in stderr and (out / "checkpoints").exists()
    assert all(not Path(f"/proc/{pid}").exists() for pid in agents)
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
