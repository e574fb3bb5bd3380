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
        "from reinforge.run.process_settings import configure_process\n"
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
