"""The `monitor` section's checks against the rest of the config, before any model is loaded."""

from __future__ import annotations

from reinforge.config import Config, ConfigError


def check_monitor_config(cfg: Config, multi_policy: bool) -> None:
    """A named verifier must be one of the reward components; several trainable policies log
    their metrics per policy, which the detectors do not read, so only warn is accepted there."""
    m = cfg.monitor
    names = [c.name for c in cfg.reward.components]
    if m.enabled and m.format_hacking.enabled and m.format_hacking.verifier is not None and m.format_hacking.verifier not in names:
        raise ConfigError(
            f"monitor.format_hacking.verifier={m.format_hacking.verifier!r} is not a reward component (components: {names}); "
            "name the one that checks correctness, or leave it unset to pick the first verifier / code_tests component"
        )
    if multi_policy and m.enabled and m.action != "warn":
        raise ConfigError(
            f"monitor.action={m.action}: the training-health monitors watch one-policy runs, and this run trains several "
            "policies (`policies:`); leave monitor.action=warn (they do not run here) or train one policy"
        )
