"""The `monitor` section: every key documented, names and bad values checked before any model."""

from __future__ import annotations

import pytest

from reinforge.cli import main
from reinforge.config import ConfigError, MonitorConfig, load_config
from reinforge.config_docs import render_config_docs
from reinforge.monitors import DETECTORS
from reinforge.monitors.config_check import check_monitor_config


def test_every_detector_has_a_documented_section() -> None:
    assert set(DETECTORS) == {n for n, f in MonitorConfig.model_fields.items() if hasattr(f.annotation, "model_fields")}
    docs = render_config_docs()
    for name in DETECTORS:
        section = MonitorConfig.model_fields[name].annotation
        for key, field in section.model_fields.items():
            assert (field.description or "").strip(), f"monitor.{name}.{key}"
            assert f"| `monitor.{name}.{key}` |" in docs
        assert DETECTORS[name].__doc__.count("fires when") >= 1  # the formula and threshold, in the docstring


def test_keys_validate(capsys) -> None:
    assert main(["config", "validate", "monitor.action=stop", "monitor.window=5", "monitor.kl_blowup.max_value=0.5",
                 "monitor.format_hacking.verifier=correct", "monitor.mode_collapse.enabled=false"]) == 0


@pytest.mark.parametrize("override, says", [
    ("monitor.action=halt", "monitor.action"),
    ("monitor.window=1", "monitor.window"),
    ("monitor.entropy_collapse.min_ratio=1.5", "monitor.entropy_collapse.min_ratio"),
    ("monitor.clip_spike.spike_factor=0.5", "monitor.clip_spike.spike_factor"),
    ("monitor.zero_variance.threshold=0.5", "monitor.zero_variance.threshold: no such config key"),
])
def test_bad_values_name_the_key(override, says) -> None:
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        load_config("default", [override])


def test_an_unknown_verifier_and_actions_on_several_policies_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"monitor\.format_hacking\.verifier='nope' is not a reward component \(components: \['correct', 'format'\]\)"):
        check_monitor_config(load_config("default", ["monitor.format_hacking.verifier=nope"]), multi_policy=False)
    check_monitor_config(load_config("default", ["monitor.format_hacking.verifier=nope", "monitor.enabled=false"]), multi_policy=False)
    with pytest.raises(ConfigError, match="watch one-policy runs"):
        check_monitor_config(load_config("default", ["monitor.action=stop"]), multi_policy=True)
    check_monitor_config(load_config("default"), multi_policy=True)  # warn: accepted (they do not run there)
