"""Deadlines for the waits a test does not mean to hit.

A test that waits for a process to start (a fresh interpreter importing torch and transformers: a
data-parallel learner follower, a Ray actor, a reward worker) must not fail because the machine is
busy: on 2 cores at load 5-9 a follower's imports took longer than 20 s, while alone they take 2-4 s.
Such a wait returns as soon as the process is up, so a generous deadline costs nothing on an idle
machine; it only bounds how long a start that really hangs takes to fail.

A deadline the test does mean to hit (a hung call, a killed peer's collective) stays tight, and the
code keeps it apart from the start-up one (`workers.startup_timeout_s`, `FollowerSpec.startup_timeout_s`,
`RayEngine(startup_timeout_s=...)`, `start_timeout_s` of the reward pools), so a test can have both.
"""

from __future__ import annotations

# A process start (imports and building a tiny model): ~100x what it takes on an idle 2-core box.
PROCESS_START_S = 600.0

# A short sandboxed program the test means to finish (bubblewrap, then a fresh `python -I`, no heavy
# imports): the wall-clock limit covers the interpreter's start too. Tests of the limit itself keep
# a tight one.
SHORT_PROGRAM_S = 60.0
