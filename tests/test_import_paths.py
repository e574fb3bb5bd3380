"""The import-path resolver (reinforge.import_paths): where user code is found, and what each
failure says. Every test runs in a fresh user project directory (tests/user_code.py)."""

from __future__ import annotations

import inspect
import os
import textwrap
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.import_paths import (
    ImportPathError,
    absolute_file_paths,
    add_import_root,
    check_call,
    import_roots,
    is_import_path,
    load_object,
    resolve_part,
)
from user_code import user_project  # noqa: F401 - fixture

SCORE = textwrap.dedent("""
    def score(task, trajectory):
        return 1.0


    class Scorer:
        class Inner:
            LIMIT = 3

        def __call__(self, task, trajectory):
            return 0.5
""")


def error_of(spec: str) -> str:
    with pytest.raises(ImportPathError) as err:
        load_object(spec)
    return str(err.value)


# ---------------------------------------------------------------------------- where code is found

def test_a_module_path_is_found_in_the_current_directory(user_project) -> None:
    user_project.write("proj_rewards_cwd.py", SCORE)
    score = load_object("proj_rewards_cwd:score")
    assert score(None, None) == 1.0
    assert Path(inspect.getfile(score)) == user_project.dir / "proj_rewards_cwd.py"
    assert import_roots()[0] == str(user_project.dir.resolve())


def test_a_package_module_and_dotted_attributes(user_project) -> None:
    user_project.write("proj_pkg/__init__.py", "")
    user_project.write("proj_pkg/rewards.py", SCORE)
    assert load_object("proj_pkg.rewards:Scorer.Inner.LIMIT") == 3
    method = load_object("proj_pkg.rewards:Scorer.__call__")
    assert method(None, None, None) == 0.5


def test_a_relative_file_in_a_recipe_is_relative_to_the_recipe_directory(user_project, tmp_path: Path) -> None:
    # The recipe lives in another directory than the one the user runs from.
    recipes = tmp_path / "experiments"
    recipes.mkdir()
    (recipes / "recipe_rewards.py").write_text(SCORE.replace("1.0", "2.0"))
    (recipes / "recipe_algos.py").write_text("def loss(logprobs, old, adv, mask, params):\n    return logprobs, {}\n")
    recipe = recipes / "exp.yaml"
    recipe.write_text(
        "reward:\n  components:\n    - {name: mine, fn: ./recipe_rewards.py:score}\n"
        "algo:\n  policy_loss: recipe_algos:loss\n"  # a module beside the recipe, by module path
    )
    cfg = load_config(str(recipe))
    fn = cfg.reward.components[0].fn
    assert fn == f"{recipes.resolve() / 'recipe_rewards.py'}:score"
    assert load_object(fn)(None, None) == 2.0
    assert str(recipes.resolve()) in import_roots()
    assert load_object(cfg.algo.policy_loss)("lp", None, None, None, None) == ("lp", {})


def test_a_relative_file_on_the_command_line_is_relative_to_the_current_directory(user_project) -> None:
    user_project.write("cli_algos.py", "def loss(logprobs, old, adv, mask, params):\n    return logprobs, {}\n")
    cfg = load_config("default", ["algo.policy_loss=./cli_algos.py:loss"])
    assert cfg.algo.policy_loss == f"{user_project.dir.resolve() / 'cli_algos.py'}:loss"
    os.chdir(user_project.dir.parent)  # resolved once: moving elsewhere afterwards changes nothing
    assert load_object(cfg.algo.policy_loss)(1, 2, 3, 4, 5) == (1, {})


def test_an_absolute_file_path(user_project, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "abs_rewards.py").write_text(SCORE)
    assert load_object(f"{elsewhere / 'abs_rewards.py'}:score")(None, None) == 1.0


def test_a_file_imports_its_sibling_modules(user_project, tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sibling_helper.py").write_text("BONUS = 0.25\n")
    (lib / "uses_sibling.py").write_text("from sibling_helper import BONUS\n\ndef score(task, trajectory):\n    return BONUS\n")
    assert load_object(f"{lib / 'uses_sibling.py'}:score")(None, None) == 0.25
    assert str(lib.resolve()) in import_roots()  # and so handed to workers, which import it the same way


def test_the_same_file_named_twice_is_one_module_imported_once(user_project) -> None:
    user_project.write("sub/.keep", "")
    user_project.write("ip_once.py", """
        from pathlib import Path

        Path(__file__).with_suffix(".log").open("a").write("imported\\n")

        def score(task, trajectory):
            return 1.0
    """)
    first = load_object("./ip_once.py:score")
    again = load_object(f"{user_project.dir / 'sub' / '..' / 'ip_once.py'}:score")
    assert first is again
    assert (user_project.dir / "ip_once.log").read_text() == "imported\n"


@pytest.mark.parametrize("first", ["module", "file"])
def test_a_file_named_by_module_path_and_by_file_path_is_one_module(user_project, first: str) -> None:
    # Its module-level code (a registration, a counter) must run once, whichever spelling comes first.
    user_project.write("ip_both_ways.py", """
        from pathlib import Path

        Path(__file__).with_suffix(".log").open("a").write("imported\\n")

        def score(task, trajectory):
            return 1.0
    """)
    spellings = ["ip_both_ways:score", "./ip_both_ways.py:score"]
    if first == "file":
        spellings.reverse()
    assert load_object(spellings[0]) is load_object(spellings[1])
    assert (user_project.dir / "ip_both_ways.log").read_text() == "imported\n"


def test_a_module_that_failed_to_import_is_imported_again_once_fixed(user_project) -> None:
    user_project.write("ip_fixed_later.py", "raise RuntimeError('not yet')\n")
    assert "not yet" in error_of("./ip_fixed_later.py:score")
    user_project.write("ip_fixed_later.py", SCORE)
    assert load_object("./ip_fixed_later.py:score")(None, None) == 1.0


def test_paths_in_a_config_tree_are_made_absolute_and_nothing_else(tmp_path: Path) -> None:
    tree = {"a": ["./x.py:f", "x.py:f", "pkg.mod:f", "calculator", 3], "b": {"c": "/abs/y.py:g", "d": "sub/z.py:Cls.m"}}
    out = absolute_file_paths(tree, tmp_path)
    base = tmp_path.resolve()
    assert out == {
        "a": [f"{base / 'x.py'}:f", f"{base / 'x.py'}:f", "pkg.mod:f", "calculator", 3],
        "b": {"c": "/abs/y.py:g", "d": f"{base / 'sub' / 'z.py'}:Cls.m"},
    }
    assert absolute_file_paths("~/r.py:f", tmp_path) == "~/r.py:f"  # the user's home, not the recipe's dir


def test_import_roots_start_with_the_current_directory_then_added_ones(user_project, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    add_import_root(extra)
    add_import_root(extra)  # once only
    roots = import_roots()
    assert roots[0] == str(user_project.dir.resolve())
    assert roots.count(str(extra.resolve())) == 1


# ---------------------------------------------------------------------------- what failures say

def test_a_missing_module_says_where_it_looked(user_project) -> None:
    message = error_of("no_such_user_module.sub:score")
    assert message.startswith("'no_such_user_module.sub:score': cannot import module 'no_such_user_module.sub'")  # the path as written
    assert "no module named 'no_such_user_module'" in message
    assert str(user_project.dir.resolve()) in message and "PYTHONPATH" in message


def test_a_missing_dependency_of_the_user_module_is_named_not_the_module(user_project) -> None:
    user_project.write("needs_dep.py", "import a_dependency_not_installed\n")
    message = error_of("needs_dep:score")
    assert "No module named 'a_dependency_not_installed'" in message
    assert f"{user_project.dir.resolve() / 'needs_dep.py'}:1" in message


def test_a_missing_name_lists_what_the_module_defines(user_project) -> None:
    user_project.write("typo_rewards.py", "import json\n" + SCORE)
    message = error_of("typo_rewards:scor")
    assert "has no attribute 'scor'" in message and "it defines: Scorer, score" in message
    assert "json" not in message.split("it defines:")[1]  # imported, not defined there
    assert str(user_project.dir / "typo_rewards.py") in message  # which file was found (a shadowing module shows)
    user_project.write("typo_file.py", SCORE)
    file_message = error_of("./typo_file.py:scor")
    assert f"{user_project.dir / 'typo_file.py'} has no attribute 'scor'" in file_message
    # An int has no namespace to list.
    assert error_of("typo_rewards:Scorer.Inner.LIMIT.x").endswith("Scorer.Inner.LIMIT has no attribute 'x'")


def test_a_syntax_error_names_the_file_and_line(user_project) -> None:
    user_project.write("broken_syntax.py", "x = 1\ndef f(:\n    pass\n")
    for spec in ("broken_syntax:f", "./broken_syntax.py:f"):
        message = error_of(spec)
        assert message.startswith(f"{spec!r}: importing ")
        assert "SyntaxError" in message and f"{user_project.dir.resolve() / 'broken_syntax.py'}:2" in message


def test_an_exception_at_import_names_the_file_and_line(user_project) -> None:
    user_project.write("raises_at_import.py", "import os\n\nCONFIG = os.environ['A_VARIABLE_NOBODY_SET']\n")
    for spec in ("raises_at_import:score", "./raises_at_import.py:score"):
        message = error_of(spec)
        assert "KeyError: 'A_VARIABLE_NOBODY_SET'" in message
        # The user's line, though the error was raised inside the standard library.
        assert f"at {user_project.dir.resolve() / 'raises_at_import.py'}:3" in message


def test_a_module_that_exits_at_import_is_an_error_not_an_exit(user_project) -> None:
    user_project.write("ip_exits.py", "import sys\nsys.exit(2)\n")
    assert "SystemExit" in error_of("./ip_exits.py:f")


def test_a_missing_file(user_project) -> None:
    assert f"no such file: {user_project.dir.resolve() / 'absent.py'}" in error_of("./absent.py:score")


@pytest.mark.parametrize("spec", ["score", "my rewards:score", "pkg.mod:", "pkg..mod:f", ":f"])
def test_not_an_import_path(spec: str) -> None:
    if is_import_path(spec):
        assert "is not an import path" in error_of(spec) and "'package.module:name'" in error_of(spec)
    else:
        assert spec == "score"  # a plain name: a built-in's


def test_resolve_part_takes_a_builtin_name_or_an_import_path(user_project) -> None:
    user_project.write("ip_part_mod.py", SCORE)
    builtins = {"one": 1, "two": 2}
    assert resolve_part("two", builtins, "widget") == 2
    assert resolve_part("ip_part_mod:score", builtins, "widget")(None, None) == 1.0
    with pytest.raises(ImportPathError, match=r"unknown widget 'three'; built-in: one, two; or name your own"):
        resolve_part("three", builtins, "widget")


def test_check_call_names_the_signature_that_does_not_fit() -> None:
    def two(task, trajectory):
        return 0.0

    check_call(two, (None, None), {}, "two", "the contract")
    with pytest.raises(ImportPathError, match=r"two: its signature \(task, trajectory\) does not fit .*; the contract"):
        check_call(two, (None,), {"scale": 2}, "two", "the contract")
    with pytest.raises(ImportPathError, match="is a int, not a callable; the contract"):
        check_call(3, (), {}, "three", "the contract")
