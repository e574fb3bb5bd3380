"""Code rewards: the response's code runs against the task's tests in the sandbox."""

from __future__ import annotations

import time

import pytest

from reinforge.rewards.builtin import REWARD_FUNCTIONS, build_reward_fn
from reinforge.rewards.code_reward import CodeTestsReward, DifficultyWeightedTests, extract_code, run_tests
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]


def task(tests=TESTS, task_id="add", **metadata) -> Task:
    return Task(id=task_id, prompt="write add(a, b)", answer="", verifier="exact",
                metadata={"tests": tests, **metadata})


def trajectory(text: str) -> Trajectory:
    return Trajectory(task_id="add", group_id=0, token_ids=[], loss_mask=[], behaviour_logprobs=[],
                      turn_spans=[], prompt_length=0, response_text=text, policy_version=0, finish_reason="stop")


def test_extract_code_takes_the_last_python_fence() -> None:
    assert extract_code("def f(): pass") == "def f(): pass"
    text = "first\n```python\nx = 1\n```\nthen\n```python\nx = 2\n```\n"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```python\ny = 3\n") == "y = 3\n"  # cut off before the closing fence


def test_correct_partial_wrong_and_malformed_code() -> None:
    reward = CodeTestsReward(timeout_s=5)
    correct = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"
    partial = "```python\ndef add(a, b):\n    return a + b if a > 0 else 99\n```"  # passes tests 0 and 2
    wrong = "def add(a, b):\n    return a - b\n"
    malformed = "```python\ndef add(a, b)\n    return a + b\n```"
    assert reward(task(), trajectory(correct)) == 1.0
    assert reward(task(), trajectory(partial)) == pytest.approx(0.5)
    assert reward(task(), trajectory(wrong)) == pytest.approx(0.25)  # only add(0, 0) == 0 holds
    assert reward(task(), trajectory(malformed)) == 0.0
    weighted = task(test_weights=[3, 1, 0, 0])
    assert reward(weighted, trajectory(partial)) == pytest.approx(0.75)


def test_faked_output_and_early_exit_earn_nothing() -> None:
    reward = CodeTestsReward(timeout_s=5)
    fake = "import os\nprint('0 0 1')\nos._exit(0)\n"
    assert reward(task(), trajectory(fake)) == 0.0
    assert reward(task(), trajectory("raise SystemExit(0)")) == 0.0


def test_hanging_solution_scores_zero_within_the_timeout() -> None:
    reward = CodeTestsReward(timeout_s=1.5)
    start = time.monotonic()
    assert reward(task(), trajectory("while True:\n    pass\n")) == 0.0
    assert time.monotonic() - start < 1.5 + 2.0
    # a hang in the third test keeps the two results before it
    hang_later = "def add(a, b):\n    while a == 2:\n        pass\n    return a + b\n"
    assert reward(task(), trajectory(hang_later)) == pytest.approx(0.5)


def test_bad_task_data_raises() -> None:
    with pytest.raises(ValueError, match="tests"):
        CodeTestsReward()(task(tests=[]), trajectory("x = 1"))
    with pytest.raises(ValueError, match="test_weights"):
        CodeTestsReward()(task(test_weights=[1, 2]), trajectory("def add(a, b): return a + b"))


def test_difficulty_weights_move_toward_the_hard_test() -> None:
    reward = DifficultyWeightedTests(timeout_s=5)
    two = task(tests=["assert f(1) == 1", "assert f(2) == 5"], task_id="hard")
    easy_only = "def f(x):\n    return x\n"
    # w_i ∝ (fails_i + 1) / (attempts_i + 2), using the counts before each call
    assert reward.weights(two) == pytest.approx([0.5, 0.5])
    assert reward(two, trajectory(easy_only)) == pytest.approx(0.5)  # 1/2 vs 1/2
    assert reward(two, trajectory(easy_only)) == pytest.approx(1 / 3)  # 1/3 vs 2/3
    assert reward(two, trajectory(easy_only)) == pytest.approx(1 / 4)  # 1/4 vs 3/4
    assert reward.weights(two) == pytest.approx([1 / 5, 4 / 5])
    hard_only = "def f(x):\n    return 5\n"
    assert reward(two, trajectory(hard_only)) == pytest.approx(0.8)
    # stats now: easy 1 fail / 4 attempts, hard 3 fails / 4 attempts -> 2/6 vs 4/6
    assert reward.weights(two) == pytest.approx([1 / 3, 2 / 3])
    other = task(tests=["assert f(1) == 1", "assert f(2) == 5"], task_id="other")
    assert reward.weights(other) == pytest.approx([0.5, 0.5])  # statistics are per task


def test_registered_by_name() -> None:
    assert isinstance(build_reward_fn("code_tests", {"timeout_s": 2}), CodeTestsReward)
    fn = REWARD_FUNCTIONS["code_tests_difficulty"]()
    assert isinstance(fn, DifficultyWeightedTests) and fn.deterministic is False


def test_difficulty_statistics_survive_a_checkpoint_round_trip():
    from reinforge.rewards.code_reward import DifficultyWeightedTests

    learned = DifficultyWeightedTests()
    learned._stats = {("t", 0): [1, 3], ("t", 1): [2, 2]}
    restored = DifficultyWeightedTests()
    restored.load_state_dict(learned.state_dict())
    assert restored._stats == learned._stats


# ---- reward hacks: the verdict is not the solution's to compute ----------------------------------
# Tests that no constant or stub passes: a hack must earn 0 where an honest wrong answer earns 0.
HACK_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(10, -3) == 7",
              "assert len(pair(5)) == 2 and pair(5) == (5, 5)", "import math\nassert math.isclose(half(3), 1.5)"]
HONEST = ("def add(a, b):\n    return a + b\n\ndef pair(x):\n    return (x, x)\n\n"
          "def half(x):\n    return x / 2\n")
NONCE = "f00dfeedf00dfeedf00dfeedf00dfeed"

REWARD_HACKS = {
    # issue 12: the tests never run; the old harness then wrote "passed" for each
    "patch_builtins_exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\n",
    "patch_compile_and_eval": "import builtins\nbuiltins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n"
                              "builtins.eval = lambda *a, **k: True\n",
    "exit_zero_before_the_tests": "import sys\nsys.exit(0)\n",
    "os_exit_zero_before_the_tests": "import os\nos._exit(0)\n",
    "print_forged_verdicts": ("import os, sys\nfor i in range(10):\n"
                              "    for line in (f'0 {i} 1', f'{i} 1', 'PASSED', f'{\"x\" * 32} {i} 1'):\n"
                              "        print(line)\n        os.write(1, (line + '\\n').encode())\n"),
    "write_into_the_judges_stdout": ("import os\nfor path in ('/proc/1/fd/1', '/proc/self/fd/1', '/dev/stdout',"
                                     " f'/proc/{os.getppid()}/fd/1'):\n"
                                     "    try:\n        with open(path, 'w') as f:\n"
                                     "            for i in range(10):\n                f.write(f'{\"0\" * 32} {i} 1\\n')\n"
                                     "    except OSError as e:\n        print(path, e)\n"),
    "steal_the_nonce_from_the_judge": (
        "import gc, sys, os\nfound = []\n"
        "for path in ('/proc/1/cmdline', '/proc/1/environ', '/proc/1/mem', f'/proc/{os.getppid()}/mem'):\n"
        "    try:\n        found.append(open(path, 'rb').read(1 << 16))\n"
        "    except OSError as e:\n        print(path, e)\n"
        "frame = sys._getframe()\nwhile frame:\n    found.append(repr(frame.f_locals))\n    frame = frame.f_back\n"
        "found += [repr(o)[:200] for o in gc.get_objects()[:20000] if isinstance(o, (str, dict))]\n"
        "print('stolen:', repr(found)[:100000])\n"),
    "override_eq_on_the_result": ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                                  "    __hash__ = object.__hash__\n"
                                  "    def __bool__(self):\n        return True\n"
                                  "def add(a, b):\n    return Anything()\n"
                                  "def pair(x):\n    return Anything()\nhalf = add\n"),
    "int_subclass_equal_to_everything": ("class Yes(int):\n    def __eq__(self, other):\n        return True\n"
                                         "def add(a, b):\n    return Yes(0)\n"),
    "list_holding_an_equal_to_all": ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                                     "def pair(x):\n    return (Anything(), Anything())\n"),
    "shadow_the_builtins_the_tests_use": ("len = lambda x: 2\nisinstance = lambda *a: True\n"
                                          "import math\nmath.isclose = lambda *a, **k: True\n"
                                          "def pair(x):\n    return None\ndef half(x):\n    return 0\n"),
    "patch_assertion_and_comparison": ("import builtins, operator\n"
                                       "builtins.AssertionError = type('Quiet', (BaseException,), {})\n"
                                       "operator.eq = lambda a, b: True\nint.__eq__\n"
                                       "import sys\nsys.excepthook = lambda *a: None\n"),
    "kill_or_stop_the_judge": ("import os, signal\n"
                               "for pid in (1, os.getppid()):\n"
                               "    for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM):\n"
                               "        try:\n            os.kill(pid, sig)\n"
                               "        except OSError as e:\n            print(pid, sig, e)\n"),
    "trace_hooks_and_audit_hooks": ("import sys\nsys.settrace(lambda *a: None)\nsys.setprofile(lambda *a: None)\n"
                                    "sys.addaudithook(lambda *a: None)\n"),
}


@pytest.fixture
def watched_sandbox(monkeypatch):
    """Every sandbox call the reward makes is watched on the host (tests/sandbox_host.py)."""
    from sandbox_host import HostWatch

    from reinforge.rewards import code_reward

    results = []
    real = code_reward.run_python

    def run(code, **kwargs):
        with HostWatch() as watch:
            result = real(code, **kwargs)
        watch.check(result, kwargs.get("memory_mb", 256), kwargs.get("disk_mb", 32))
        results.append(result)
        return result

    monkeypatch.setattr(code_reward, "run_python", run)
    monkeypatch.setattr(code_reward.secrets, "token_hex", lambda n: NONCE)
    return results


def test_the_honest_solution_passes_the_hack_tests(watched_sandbox) -> None:
    assert CodeTestsReward(timeout_s=5).score(task(tests=HACK_TESTS), HONEST) == 1.0


@pytest.mark.parametrize("hack", sorted(REWARD_HACKS))
def test_reward_hacks_earn_nothing(hack, watched_sandbox) -> None:
    reward = CodeTestsReward(timeout_s=5)
    start = time.monotonic()
    assert reward.score(task(tests=HACK_TESTS), REWARD_HACKS[hack]) == 0.0
    assert NONCE not in watched_sandbox[-1].stdout.replace(f"{NONCE} ", "") + watched_sandbox[-1].stderr
    assert not watched_sandbox[-1].timed_out and time.monotonic() - start < 5  # not a hang either


@pytest.mark.parametrize("hack", ["patch_builtins_exec", "patch_assertion_and_comparison", "trace_hooks_and_audit_hooks"])
def test_a_hack_beside_an_honest_solution_changes_nothing(hack, watched_sandbox) -> None:
    # the judge's tests still run, against the honest functions
    assert CodeTestsReward(timeout_s=5).score(task(tests=HACK_TESTS), REWARD_HACKS[hack] + "\n" + HONEST) == 1.0


def test_tests_see_plain_values_and_handles() -> None:
    solution = ("import math\nclass Point:\n    def __init__(self, x):\n        self.x = x\n"
                "    def norm(self):\n        return abs(self.x)\n"
                "def gen(n):\n    yield from range(n)\n"
                "def table():\n    return {'a': [1, (2, 3)], 'b': {4}, 'c': None, 'd': 1.5, 'e': b'x', 'f': 2 ** 100}\n"
                "def fail(x):\n    raise ValueError(x)\n"
                "class Box:\n    def __len__(self):\n        return 3\n    def __contains__(self, x):\n        return x == 2\n"
                "    def __getitem__(self, i):\n        return i * 10\n")
    tests = ["assert Point(-4).x == -4 and Point(-4).norm() == 4",
             "assert list(gen(3)) == [0, 1, 2]",
             "assert table() == {'a': [1, (2, 3)], 'b': {4}, 'c': None, 'd': 1.5, 'e': b'x', 'f': 2 ** 100}",
             "try:\n    fail('no')\nexcept ValueError as e:\n    assert str(e) == 'no'\nelse:\n    raise AssertionError",
             "b = Box()\nassert len(b) == 3 and 2 in b and 5 not in b and b[4] == 40",
             "p = Point(1)\nassert p == p and p != Point(1)",  # a handle equals only itself
             "assert Point(2) == 2"]  # never delegated to the solution's __eq__: fails
    assert run_tests(task(tests=tests), solution) == [True] * 6 + [False]


def test_a_solution_that_dies_is_reloaded_for_the_next_test() -> None:
    solution = "import os\ndef add(a, b):\n    if a == 2:\n        os._exit(0)\n    return a + b\n"
    assert run_tests(task(), solution) == [True, True, False, True]
