"""A user's rewards under `workers.reward_workers=2`: named by module path (found in the current
directory) and by ./file.py path (beside the recipe), run from the user's project directory, they
are imported by the Ray reward workers (whose own working directory is elsewhere) and score
exactly as worker processes do. A worker that cannot import the user's module stops the run at
its start with the import error and leaves no worker process behind.

One Ray session (2 CPUs) for the module, started before any test moves to its project directory,
so the workers' working directory is not the project's: only the import roots lead them there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.rewards.call_errors import RewardWorkerStartError
from user_code import user_project  # noqa: F401 - fixture

ray = pytest.importorskip("ray")

from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from reinforge.distributed.ray_rewards import build_ray_scorer  # noqa: E402
from reinforge.run.pipeline import run_training  # noqa: E402
from deadlines import PROCESS_START_S  # noqa: E402

GENEROUS_S = PROCESS_START_S + 240  # a bound on hanging (the workers' start has its own), not a timing

PROJECT_REWARDS = """
    import os
    from pathlib import Path


    def close_to_answer(task, trajectory, tolerance=2):
        # Where each call ran, for the test (a reward would not do this).
        with open(Path(__file__).with_name("calls.log"), "a") as log:
            log.write(f"{os.getpid()}\\n")
        return max(0.0, 1.0 - abs(len(trajectory.response_text) - len(task.answer)) / tolerance)
"""

RECIPE_REWARDS = """
    from reinforge.rewards.user_rewards import group_reward


    class LetterShare:
        def __init__(self, letters):
            self.letters = set(letters)

        def __call__(self, task, trajectory):
            text = trajectory.response_text
            return sum(c in self.letters for c in text) / max(1, len(text))


    @group_reward
    def longest_in_group(task, trajectories):
        longest = max(len(t.response_text) for t in trajectories)
        return [float(len(t.response_text) == longest) for t in trajectories]
"""

RECIPE = """
reward:
  components:
    - {name: close, fn: "project_rewards:close_to_answer", params: {tolerance: 4}}
    - {name: letters, fn: ./recipe_rewards.py:LetterShare, params: {letters: abcdefghijklm}}
    - {name: longest, fn: ./recipe_rewards.py:longest_in_group, weight: 0.5}
"""

RUN = [
    "model.preset=nano", "task.train_size=40", "task.eval_size=4", "sft.steps=0", "trainer.steps=1",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "eval.every=100",
    "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb='off'", "workers.timeout_s=120", f"workers.startup_timeout_s={PROCESS_START_S:g}", "workers.cpus_per_worker=0.5",
]


SESSION_MARKER = uuid.uuid4().hex  # in this session's environment, which its Ray processes inherit


@pytest.fixture(scope="module")
def ray_session():
    os.environ["REINFORGE_RAY_USER_REWARDS_TEST"] = SESSION_MARKER  # other sessions' workers are not ours to count
    start_ray(None, num_cpus=2)
    yield
    stop_ray()
    del os.environ["REINFORGE_RAY_USER_REWARDS_TEST"]


def reward_worker_processes(marker: str) -> list[int]:
    """Live `ray::RewardWorker` actor processes whose environment has `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"ray::RewardWorker" not in (entry / "cmdline").read_bytes():
                continue
            if marker.encode() not in (entry / "environ").read_bytes():
                continue
        except OSError:  # gone, or not ours to read
            continue
        found.append(int(entry.name))
    return found


def wait_until_none_left(marker: str = SESSION_MARKER) -> list[int]:
    """Killed actors exit asynchronously: wait (boundedly) for them to go."""
    deadline = time.monotonic() + 60
    while (left := reward_worker_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_user_rewards_run_on_two_ray_reward_workers_as_in_worker_processes(ray_session, user_project, tmp_path) -> None:
    user_project.write("project_rewards.py", PROJECT_REWARDS)
    user_project.write("recipes/recipe_rewards.py", RECIPE_REWARDS)
    recipe = user_project.write("recipes/exp.yaml", RECIPE)
    log = user_project.dir / "calls.log"
    rewards, pids = {}, {}
    for where, workers in (("processes", 0), ("ray", 2)):
        log.write_text("")
        cfg = load_config(str(recipe), [*RUN, f"workers.reward_workers={workers}", f"trainer.output_dir={tmp_path / where}"])
        outcome = run_training(cfg)
        rewards[where] = outcome.rl.rewards
        pids[where] = {int(line) for line in log.read_text().split()}
        step = outcome.rl.steps[-1]
        assert {"reward/close/mean", "reward/letters/mean", "reward/longest/mean"} <= step.keys()
        assert step["reward_errors"] == 0.0
    assert rewards["ray"] == pytest.approx(rewards["processes"], abs=1e-9)
    assert len(rewards["ray"]) == 1
    # Each ran away from the trainer: in its worker processes, then in the two Ray actors.
    assert pids["processes"] and pids["ray"] and os.getpid() not in pids["processes"] | pids["ray"]
    assert not pids["processes"] & pids["ray"] and len(pids["ray"]) <= 2
    assert wait_until_none_left() == []  # the run closed its actors


MOODY = """
    import math
    import time


    def moody(task, trajectory):
        text = trajectory.response_text
        if text == "raise":
            raise ValueError("this reward refuses the word 'raise'")
        if text == "hang":
            time.sleep(3600)
        return {"nan": math.nan, "none": None}.get(text, float(len(text)))
"""


# slow (pytest -m slow): the same failures are counted in worker processes (test_user_rewards_in_workers.py) and a hung Ray call in test_ray_workers.py
@pytest.mark.slow
def test_a_user_reward_that_raises_hangs_or_returns_a_non_number_on_ray_is_counted(ray_session, user_project) -> None:
    from reinforge.rollout.trajectory import single_turn_trajectory
    from reinforge.tasks.task import Task

    user_project.write("moody_ray.py", MOODY)
    scorer = build_ray_scorer([("mine", "moody_ray:moody", 1.0, {}), ("correct", "verifier", 1.0, {})], 1,
                              call_timeout_s=2, start_timeout_s=PROCESS_START_S, cpus_per_worker=0.5, timeout_s=2,
                              max_error_fraction=1.0, workers=2)
    try:
        batch = [single_turn_trajectory("sum", [1], [2], [-0.1], text, "stop", i)
                 for i, text in enumerate(["5", "raise", "hang", "nan", "none"])]
        metrics = scorer.score({"sum": Task(id="sum", prompt="2+3=", answer="5")}, batch)
        # The marker reaches the actor processes (what the no-process-left checks rely on).
        assert reward_worker_processes(SESSION_MARKER) != []
    finally:
        scorer.close()
    assert wait_until_none_left() == []
    assert [t.reward_failures for t in batch] == [
        {}, {"mine": "raised"}, {"mine": "timeout"}, {"mine": "not_a_number"}, {"mine": "not_a_number"},
    ]
    assert batch[0].rewards == {"mine": 1.0, "correct": 1.0}
    assert "this reward refuses the word 'raise'" in batch[1].errors[0]
    assert metrics["reward_failed/mine/not_a_number"] == 2.0 and metrics["reward_failed/mine/timeout"] == 1.0
    assert not any(k.startswith("reward_failed/correct") for k in metrics)


SECOND_IMPORTER_FAILS = """
    import os
    from pathlib import Path

    # Stands for a module that one worker cannot import (a missing file on its node, another
    # PYTHONPATH): the trainer imports it first, the first worker next, the second worker fails.
    for slot in range(10):
        try:
            os.close(os.open(Path(__file__).with_name(f"slot{slot}"), os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            continue
    if slot == 2:
        raise ImportError("this worker cannot import uneven_rewards")


    def score(task, trajectory):
        return 1.0
"""


# slow (pytest -m slow): `reinforge train` stopping at start on the same failure is in the suite (test_reinforge_train_stops_at_start_...)
@pytest.mark.slow
def test_any_ray_worker_that_cannot_import_the_user_module_stops_the_pool_at_start(ray_session, user_project) -> None:
    user_project.write("uneven_rewards.py", SECOND_IMPORTER_FAILS)
    from reinforge.rewards.builtin import build_component

    build_component("uneven_rewards:score", {})  # the trainer's own import (preflight) takes slot 0
    with pytest.raises(RewardWorkerStartError) as err:
        build_ray_scorer([("mine", "uneven_rewards:score", 1.0, {})], 2, call_timeout_s=30, start_timeout_s=PROCESS_START_S,
                         cpus_per_worker=0.5)
    message = str(err.value)
    assert err.value.component == "mine"
    assert "a Ray reward worker" in message and "cannot build reward component 'mine'" in message
    assert "ImportError: this worker cannot import uneven_rewards" in message
    assert f"{user_project.dir.resolve() / 'uneven_rewards.py'}:" in message
    assert str(user_project.dir.resolve()) in message.split("import user code from")[1]  # where it looked
    assert "Traceback" not in message
    assert sorted(p.name for p in user_project.dir.glob("slot*")) == ["slot0", "slot1", "slot2"]  # both workers tried
    assert wait_until_none_left() == []  # the worker that did start was killed too


CLI_TRAINER_ONLY = """
    import trainer_only_dependency  # the trainer has it (see the command); the workers do not


    def score(task, trajectory):
        return 1.0
"""


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_reinforge_train_stops_at_start_when_its_ray_workers_cannot_import_the_reward(user_project) -> None:
    """The reported case, as a user runs it: `reinforge train` from the project directory, with
    reward workers on a local Ray cluster. It must stop with the import error, readable, and leave
    no `ray::RewardWorker` running (one used to be left behind)."""
    user_project.write("needs_trainer_rewards.py", CLI_TRAINER_ONLY)
    marker = uuid.uuid4().hex
    # `reinforge train`, in a process that has a module its Ray workers lack.
    command = (
        "import sys, types; sys.modules['trainer_only_dependency'] = types.ModuleType('trainer_only_dependency'); "
        "from reinforge.cli import main; sys.exit(main())"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "REINFORGE_RAY_ORPHAN_TEST": marker}
    done = subprocess.run(
        [sys.executable, "-c", command, "train", *RUN, "workers.reward_workers=2",
         'reward.components=[{name: mine, fn: "needs_trainer_rewards:score"}]',
         f"trainer.output_dir={user_project.dir / 'run'}"],
        env=env, capture_output=True, text=True, timeout=GENEROUS_S, cwd=user_project.dir,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "reinforge: config error: reward.components[0] (mine): a Ray reward worker" in done.stderr
    assert "No module named 'trainer_only_dependency'" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert wait_until_none_left(marker) == [], "a ray::RewardWorker outlived the run"
    metrics = user_project.dir / "run" / "metrics.jsonl"
    assert not metrics.exists() or '"stage": "rl"' not in metrics.read_text()  # stopped before any step
