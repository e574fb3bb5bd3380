"""The base of every config section, and the error a config that cannot run raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the fix."""


class Section(BaseModel):
    # allow_inf_nan=False: no float setting means anything as inf or nan (`algo.lr=inf` failed only
    # at step 1); free-form dicts (task.params, env.params) are Any and keep what they are given.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
