"""A first step whose every response scored zero: said loudly, with what to check.

Group-relative estimators learn nothing from a batch where every reward is equal, and a run that
starts at zero often stays there: the model cannot answer in the form the reward reads (a chat
model given raw prompts, an answer the extractor does not find, responses cut at max_new_tokens).
A user learned that only after the whole run; this says it after step 1, naming the reward
components and the settings that decide it, and how to see the prompts and answers.
"""

from __future__ import annotations

from reinforge.config import Config
from reinforge.rollout.trajectory import Trajectory


def zero_reward_warning(trajectories: list[Trajectory], cfg: Config) -> str | None:
    """The warning when every scored response of the batch has reward 0; None otherwise."""
    scored = [t for t in trajectories if not t.reward_failures]
    if not scored or any(t.reward != 0.0 for t in scored):
        return None
    components = ", ".join(f"{c.name} ({c.fn})" for c in cfg.reward.components) or "none"
    cut = sum(t.finish_reason == "length" for t in scored) / len(scored)
    model = cfg.model.path or f"the {cfg.model.preset} model"
    return (
        f"every one of the first step's {len(scored)} responses scored 0 (reward components: {components}): "
        "the policy gets no learning signal, and a run that starts at zero often stays there. Check the model's "
        f"base accuracy and what it is asked before a long run: `reinforge eval --model {model}` shows the prompts, "
        "responses and the answers extracted from them. Settings that decide it: "
        f"rollout.prompt_format={cfg.rollout.prompt_format} (chat models need chat or auto), "
        f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} ({cut:.0%} of the responses were cut there), "
        f"task.answer_extractor={getattr(cfg.task, 'answer_extractor', None)} (where the verifier looks for the answer) and "
        f"task.instruction (what the prompt asks the answer to look like)."
    )
