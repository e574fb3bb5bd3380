"""Versioned draws: which state of the curriculum picks a step's prompts under the async schedule.

Who draws with what (reinforge.values.curriculum_collector sets it per step): in a sync run the
loop's thread draws step s with the value model as `observe` left it after step s-1, from prompt
states of the weights that sample. Under the async schedule a producer thread draws step s while the
learner's thread trains the model on older steps, so the draw must not read the live model: at each
`observe(step=t)` the sampler keeps a version (a frozen copy of the value model, and DUMP's
learnability windows), and the producer draws step s with the version of the weights it samples with,
t = s-1-L (reinforge.trainer.rollout_schedule: the oldest allowed, fixed by the config), featurized by
those weights. Which model picked which prompts is then fixed by the config, not by thread timing, and
the draw stands to the outcomes as in a sync run: one version behind the weights it predicts for.

The sampler (reinforge.values.curriculum_sampler) holds the versions, step -> version, under its lock
(the producer takes, the learner's thread adds); these are the operations on them.
"""

from __future__ import annotations

from reinforge.values.dump import DistributionBandit
from reinforge.values.value_model import PromptValueModel


def version_now(values: dict[str, PromptValueModel], bandit: DistributionBandit | None) -> dict:
    """The curriculum as it is now, frozen: each policy's value model and DUMP's windows."""
    return {
        "value": {name: model.snapshot() for name, model in values.items()} if values else None,
        "windows": bandit.windows_copy() if bandit is not None else None,
    }


def version_to_draw(versions: dict[int, dict], index: int | None) -> dict:
    """The version a draw at weights step `index` uses: the newest at or before it (a resumed run with
    more steps samples its first batches with newer weights than the index, and the newest version
    serves). Drops the older versions from `versions`."""
    at_or_before = [i for i in versions if index is None or i <= index]
    key = max(at_or_before) if at_or_before else min(versions)
    for old in [i for i in versions if i < key]:  # the producer draws in step order: never needed again
        del versions[old]
    return versions[key]


def versions_state(versions: dict[int, dict]) -> dict[int, dict]:
    """The versions in a checkpoint: each value model as the state its snapshot predicts with."""
    return {
        index: {"value": {n: m.snapshot_state() for n, m in v["value"].items()} if v["value"] is not None else None,
                "windows": v["windows"]}
        for index, v in versions.items()
    }


def versions_from_state(saved: dict[int, dict], values: dict[str, PromptValueModel]) -> dict[int, dict]:
    """`versions_state`'s inverse, snapshots of the live `values` (also a checkpoint from before several
    policies, one model's state per version)."""
    names = list(values)

    def snapshots(saved_value) -> dict[str, PromptValueModel]:
        per_name = {names[0]: saved_value} if "net" in saved_value else saved_value
        return {n: values[n].snapshot_from_state(v) for n, v in per_name.items()}

    return {
        index: {"value": snapshots(v["value"]) if v["value"] is not None else None, "windows": v["windows"]}
        for index, v in saved.items()
    }
