"""trainer.cpus pins the process to cores; trainer.threads sets torch's thread count; bad lists are refused at load."""

import os
import subprocess
import sys

import pytest

from reinforge.config import ConfigError, load_config


def test_a_run_pins_its_process_to_the_listed_cores() -> None:
    # In a child, so that this test process keeps its own cores and threads.
    first = min(os.sched_getaffinity(0))
    code = (
        "import os, torch\n"
        "from reinforge.runtime.process_settings import configure_process\n"
        f"configure_process(1, [{first}])\n"
        "print(sorted(os.sched_getaffinity(0)), torch.get_num_threads())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == f"[{first}] 1"


def test_the_config_takes_usable_cores_and_refuses_others() -> None:
    usable = sorted(os.sched_getaffinity(0))
    assert load_config("default", [f"trainer.cpus=[{usable[0]}]"]).trainer.cpus == [usable[0]]
    assert load_config("default", []).trainer.cpus is None
    missing = max(usable) + 1000
    with pytest.raises(ConfigError) as err:
        load_config("default", [f"trainer.cpus=[{missing}]"])
    assert "trainer.cpus" in str(err.value) and str(missing) in str(err.value) and "available" in str(err.value)
    for bad in ("[]", f"[{usable[0]}, {usable[0]}]"):
        with pytest.raises(ConfigError, match="list each core once"):
            load_config("default", [f"trainer.cpus={bad}"])


FAULTS_OF_REALLOCATING = (
    "import resource, sys, torch\n"
    "from reinforge.runtime.process_settings import retain_freed_memory\n"
    "applied = retain_freed_memory() if sys.argv[1] == 'on' else False\n"
    "def step():  # a forward's activations (37 MiB each, over glibc's largest mmap threshold), then freed\n"
    "    kept = [torch.ones(64, 71, 2048) for _ in range(4)]\n"
    "    del kept\n"
    "for _ in range(3):\n"
    "    step()\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(5):\n"
    "    step()\n"
    "print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_retained_memory_is_reused_with_few_page_faults() -> None:
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    if os.path.exists(thp) and "[always]" in open(thp).read():
        pytest.skip("transparent huge pages are always on here: 2 MiB faults, too few to compare")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    results = {}
    for side in ("off", "on"):
        out = subprocess.run([sys.executable, "-c", FAULTS_OF_REALLOCATING, side], capture_output=True, text=True, check=True, env=env)
        applied, faults = out.stdout.split()
        results[side] = (applied, int(faults))
    assert results["on"][0] == "True" and results["off"][0] == "False"
    # Without: each 37 MiB tensor is a fresh mmap whose 9,088 pages fault in again, 20 of them:
    # ~180,000 faults (fewer, larger ones with transparent huge pages). With: the heap hands the
    # same memory out again; measured 0 in most runs, 36,352 (one step's worth) in some, as the
    # heap's layout varies with address randomization.
    assert results["off"][1] > 20_000
    assert results["on"][1] < results["off"][1] / 3


def test_a_user_malloc_tunable_wins(monkeypatch) -> None:
    from reinforge.runtime.process_settings import retain_freed_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    assert retain_freed_memory() is False
