"""Adapter refusals that need no foreign package: a missing or unsupported verifiers package, and
an object that fits no env shape at all."""

from __future__ import annotations

import sys
import types

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import check_env_config


def loader_file(tmp_path):
    module = tmp_path / "vf_like.py"
    module.write_text("def load_environment(**kwargs):\n    raise AssertionError('never called')\n")
    return module


def test_a_verifiers_env_without_the_extra_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers raises ImportError
    cfg = load_config("default", [f"env.type={loader_file(tmp_path)}:load_environment", "rollout.prompt_format=auto"])
    with pytest.raises(ConfigError, match=r"verifiers package is not installed: pip install 'reinforge\[verifiers\]'"):
        check_env_config(cfg)


def test_an_unsupported_verifiers_version_is_refused_with_the_reason(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", types.SimpleNamespace(__version__="0.4.0"))
    cfg = load_config("default", [f"env.type={loader_file(tmp_path)}:load_environment", "rollout.prompt_format=auto"])
    with pytest.raises(ConfigError, match=r"verifiers 0.4.0 is installed; .*verifiers>=0.2,<0.4 \(0.4 replaced it"):
        check_env_config(cfg)


def test_an_object_of_no_shape_lists_every_shape_and_what_it_lacks(tmp_path) -> None:
    module = tmp_path / "nothing.py"
    module.write_text("class Nothing:\n    pass\n")
    with pytest.raises(ConfigError) as err:
        check_env_config(load_config("default", [f"env.type={module}:Nothing", "rollout.prompt_format=auto"]))
    message = str(err.value)
    for shape in ("a reinforge Env", "a verifiers environment", "a SkyRL text env", "a gym-style text env", "a TRL environment"):
        assert f"as {shape} it" in message
    assert "has no reset(), step()" in message and "has no init(), step()" in message


def test_adapters_refuse_the_raw_prompt_format(tmp_path) -> None:
    module = tmp_path / "gym_like.py"
    module.write_text("class G:\n    def reset(self, seed=None):\n        return 'x', {}\n    def step(self, action):\n        return 'x', 0.0, True, False, {}\n")
    with pytest.raises(ConfigError, match=r"gym-style text env: its episodes are chat turns.*rollout.prompt_format=raw"):
        check_env_config(load_config("default", [f"env.type={module}:G", "rollout.prompt_format=raw"]))
