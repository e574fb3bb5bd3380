"""Bad command lines and recipes end in one clear line on stderr and exit status 2, before any
compute: no traceback, no hang, no option silently ignored (issue 31, "CLI and config")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reinforge import cli
from reinforge.config import load_config
from reinforge.config.loading import MAX_EXPANDED_NODES

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "default.yaml")

# A "billion laughs" recipe: 10 lines; each list holds 9 aliases of the line above, 9**9 strings expanded.
BILLION_LAUGHS = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["task: {params: {x: *a8}}"]
) + "\n"
# The same in one override value (flow style): 10**6 values.
OVERRIDE_BOMB = "task.params.x=[&b0 [1,1,1,1,1,1,1,1,1,1]" + "".join(
    f", &b{i} [{','.join([f'*b{i - 1}'] * 10)}]" for i in range(1, 6)
) + "]"


@pytest.fixture
def no_compute(monkeypatch):
    """A command that gets past the checks fails the test here instead of training or loading a model."""

    def reached(*_args, **_kwargs):
        raise AssertionError("the command reached compute instead of refusing its arguments")

    import reinforge.run.eval_command as eval_command
    import reinforge.run.serve_command as serve_command
    import reinforge.run.pipeline as pipeline

    for module, name in ((pipeline, "run_training"), (pipeline, "run_sft_stage"), (serve_command, "serve"), (eval_command, "run_eval")):
        monkeypatch.setattr(module, name, reached)


@pytest.fixture
def busy_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def _files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "bomb.yaml").write_text(BILLION_LAUGHS)
    (tmp_path / "recursive.yaml").write_text("a: &a [1, *a]\n")
    return {"file": str(tmp_path / "a_file"), "bomb": str(tmp_path / "bomb.yaml"), "recursive": str(tmp_path / "recursive.yaml")}


# (case, argv with {file} / {bomb} / {recursive} / {port} filled in, what the message must say)
CASES = [
    ("billion-laughs recipe", ["config", "show", "{bomb}"], "anchors and aliases"),
    ("billion-laughs recipe, train", ["train", "{bomb}"], "anchors and aliases"),
    ("recursive alias", ["config", "show", "{recursive}"], "recursive recipe"),
    ("alias bomb in an override", ["config", "show", RECIPE, OVERRIDE_BOMB], "override task.params.x"),
    ("--output is a regular file", ["train", RECIPE, "--output", "{file}"], "is a file, not a directory"),
    ("--output under a regular file", ["train", RECIPE, "--output", "{file}/run"], "is a file, not a directory"),
    ("sft --output is a regular file", ["sft", RECIPE, "--output", "{file}"], "is a file, not a directory"),
    ("trainer.output_dir is a regular file", ["train", RECIPE, "trainer.output_dir={file}"], "trainer.output_dir"),
    ("config validate, trainer.output_dir a file", ["config", "validate", RECIPE, "trainer.output_dir={file}"], "is a file, not a directory"),
    ("eval --output is a regular file", ["eval", "--model", "{file}", "--output", "{file}"], "is a file, not a directory"),
    ("compare --output is a regular file", ["compare", RECIPE, "--algos", "grpo", "--output", "{file}"], "is a file, not a directory"),
    ("seed 2**70", ["train", RECIPE, f"trainer.seed={2**70}"], "trainer.seed"),
    ("negative seed", ["config", "show", RECIPE, "trainer.seed=-1"], "trainer.seed"),
    ("lr inf", ["train", RECIPE, "algo.lr=inf"], "algo.lr: Input should be a finite number"),
    ("lr .inf (YAML's spelling)", ["config", "show", RECIPE, "algo.lr=.inf"], "algo.lr: Input should be a finite number"),
    ("lr nan", ["config", "show", RECIPE, "algo.lr=nan"], "algo.lr: Input should be a finite number"),
    ("lr .nan", ["config", "show", RECIPE, "algo.lr=.nan"], "algo.lr: Input should be a finite number"),
    ("unbounded float inf", ["config", "show", RECIPE, "env.valid_call_reward=.inf"], "env.valid_call_reward"),
    ("float in a tuple", ["config", "show", RECIPE, "reward.clip=[0, .inf]"], "reward.clip"),
    ("float in a list", ["config", "show", RECIPE, "algo.rollout_reject_threshold=[.nan]"], "algo.rollout_reject_threshold"),
    ("monitor float", ["config", "show", RECIPE, "monitor.kl_blowup.max_value=.inf"], "monitor.kl_blowup.max_value"),
    ("--checkpoint without --resume", ["train", RECIPE, "--checkpoint", "{file}"], "add --resume RUN_DIR"),
    ("--force without --resume", ["train", RECIPE, "--force"], "add --resume RUN_DIR"),
    ("serve on a port in use", ["serve", "{file}", "--port", "{port}"], "is already in use; pick another with --port N"),
    ("serve on no port", ["serve", "{file}", "--port", "70000"], "not a TCP port"),
    ("serve with no body size", ["serve", "{file}", "--max-body-mb", "0"], "--max-body-mb 0.0 must be a size above 0"),
]


def _assert_one_line_error(code: int, err: str, expected: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("reinforge: ") and expected in lines[0], lines[0]


@pytest.mark.parametrize("argv,expected", [pytest.param(a, e, id=c) for c, a, e in CASES])
def test_bad_input_is_one_line_before_compute(argv, expected, tmp_path, no_compute, busy_port, capsys):
    names = {**_files(tmp_path), "port": busy_port}
    filled = []
    for arg in argv:
        for name, value in names.items():
            arg = arg.replace(f"{{{name}}}", str(value))
        filled.append(arg)
    code = cli.main(filled)
    out, err = capsys.readouterr()
    _assert_one_line_error(code, err, expected)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_unwritable_output(tmp_path, no_compute, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anyway; the path-under-a-file case covers root
            pytest.skip("this user may write a 0o500 directory (root)")
        for output, expected in ((locked, "is not writable"), (locked / "run", "cannot be created")):
            code = cli.main(["train", RECIPE, "--output", str(output)])
            _assert_one_line_error(code, capsys.readouterr().err, expected)
    finally:
        locked.chmod(0o700)


def test_billion_laughs_ends_at_once_in_a_fresh_process(tmp_path):
    """The whole command, not a hang: the timeout only guards the suite (before the fix it ran past 240 s)."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.splitlines()) == 10
    done = subprocess.run(
        [sys.executable, "-m", "reinforge.cli", "config", "validate", str(bomb)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    _assert_one_line_error(done.returncode, done.stderr, "anchors and aliases")


def test_shared_aliases_below_the_bound_still_load(tmp_path):
    """Aliases are fine where they expand to a reasonable tree: only the bomb is refused."""
    recipe = tmp_path / "aliases.yaml"
    recipe.write_text("task:\n  params: {a: &p {x: 1, y: [1, 2]}, b: *p}\ntrainer: {seed: 4294967295}\n")
    cfg = load_config(str(recipe), ["algo.lr=2e-5", f"task.params.c=[&q [{','.join(['1'] * 100)}], {', '.join(['*q'] * 100)}]"])
    assert cfg.task.params["b"] == {"x": 1, "y": [1, 2]}
    assert len(cfg.task.params["c"]) == 101 and 101 * 100 < MAX_EXPANDED_NODES
    assert cfg.trainer.seed == 2**32 - 1 and cfg.algo.lr == 2e-5


def test_the_largest_seed_reaches_the_sampler_in_every_derived_form(nano_model, arithmetic_prompts):
    """trainer.seed < 2**32 is accepted; the seeds derived from it (a step's rounds, a multi-turn
    episode's turns) pass 2**64 and must still seed the engine, the same way torch reads seeds."""
    from reinforge.engines.base import SamplingParams
    from reinforge.engines.torch_engine import TorchEngine
    from reinforge.rollout.episodes import turn_seed
    from reinforge.trainer.collect import round_seed, step_seed

    engine = TorchEngine(nano_model, 0)
    params = SamplingParams(max_new_tokens=4)
    largest = load_config(RECIPE, [f"trainer.seed={2**32 - 1}"]).trainer.seed
    derived = turn_seed(round_seed(step_seed(largest, 200), 3), 2)
    assert derived >= 2**64
    tokens = lambda seed: [g.token_ids for g in engine.generate(arithmetic_prompts, params, seed=seed)]  # noqa: E731
    assert tokens(derived) == tokens(derived % 2**64)
    assert tokens(-1) == tokens(2**64 - 1)  # unchanged: torch took -1 as 2**64 - 1 before
