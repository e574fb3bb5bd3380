"""Adapters for envs written for other ecosystems (docs/adapters.md), tried in this order.

Each module holds one adapter and documents the exact contract it accepts: `gym_env` (gymnasium /
GEM `reset` / `step`), `skyrl_env` (SkyRL's BaseTextEnv `init` / `step`), `trl_env` (TRL's
`environment_factory` classes: `reset` and tool methods), `verifiers_env` (the `verifiers`
package's `load_environment`). The shared token work is in `chat_text`.
"""

from __future__ import annotations

from reinforge.envs.adapters import gym_env, seed_tasks, skyrl_env, trl_env, verifiers_env  # noqa: F401 - seed_tasks: a task source by path

# SkyRL before gym: a SkyRL env may inherit a reset() it does not use; its init() tells them apart.
ADAPTERS = [verifiers_env.ADAPTER, skyrl_env.ADAPTER, gym_env.ADAPTER, trl_env.ADAPTER]
