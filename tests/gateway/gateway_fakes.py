"""Engines for gateway tests: a scripted one (text in, tokens out) and a counting wrapper."""

from __future__ import annotations

from reinforge.engines.base import Generation


class ScriptedEngine:
    """Answers every row with the text `script(call, row)` tokenized, closed by `stop_id`; log-probs
    -0.1 * (i + 1). Raises when `script` returns an exception instance."""

    policy_version = 2

    def __init__(self, tokenizer, script, stop_id):
        self.tokenizer, self.script, self.stop_id = tokenizer, script, stop_id
        self.calls: list[tuple[list[list[int]], object]] = []

    def generate(self, prompts, params, seed=None):
        self.calls.append((prompts, params))
        out = []
        for row, _ in enumerate(prompts):
            text = self.script(len(self.calls) - 1, row)
            if isinstance(text, Exception):
                raise text
            ids = self.tokenizer(text, add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.1 * (i + 1) for i in range(len(ids))], "stop", self.policy_version))
        return out

    def sync_weights(self, version):
        self.policy_version = version


class CountingEngine:
    """Forwards to `engine` and records each generate call's prompts and params."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.policy_version = engine.policy_version

    def generate(self, prompts, params, seed=None, budgets=None):
        self.calls.append((list(prompts), params, budgets))
        return self.engine.generate(prompts, params, seed=seed, budgets=budgets)

    def sync_weights(self, version):
        self.engine.sync_weights(version)
