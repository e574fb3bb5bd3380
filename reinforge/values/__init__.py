"""Value models across the loop (issue 17): predicted success picks prompts, sets baselines, prunes
rollouts and credits turns.

The prompt-value side: a model of the policy's pass rate on a prompt, before any token of it is
sampled, and what uses it.

- `value_model`: the V0-style prompt-value model, trained online from every group's outcome.
- `features`: the prompt's representation, the policy's own detached hidden states.
- `calibration`: Brier score and reliability curve of its predictions.
- `selection`: PCL's rule, the prompts whose predicted pass rate is nearest a target.
- `dump`: DUMP's UCB over task distributions.
- `item_seats`: what an item's outcomes are: one per (item, trained seat), a game's seats each
  its own, a gateway agent's episode once however many pieces it came in.
- `policy_values`: a value model per policy, each predicting its own seats from its own prompt states.
- `pending_predictions`: the predictions made at draw time, waiting for their groups' outcomes.
- `value_learning`: what the models take from the outcomes (scored, then trained on).
- `draw_versions`: the frozen copies the async producer draws with, and why.
- `group_advantages`: each group's mean |advantage|, DUMP's learnability signal.
- `curriculum_sampler`: the trainer's task sampler with all of the above behind `next_batch`.
- `sampler_factory`: the plain sampler or the curriculum one, as the config asks.
- `config_check`: settings the value model cannot serve, refused before compute.

The success head's side (the head itself: reinforge.models.success_head, its training:
reinforge.learner.success_head_learner):
- `rollout_pruning`: stop rollouts predicted to fail while sampling (a decode hook, or checks between
  chunks of sampling on any engine), keeping each group informative.
- `turn_progress`: SPA-RL's per-turn progress, increments that sum to the episode outcome.
- `value_heads`: the collector wrapper that runs both heads around the rollout schedule.
- `value_heads_check`: their settings refused before compute.

The advantage baseline that uses the prediction as a prior (V0.5) is an estimator like the others:
`reinforge.algos.advantages.value_prior`. See docs/value_models.md and docs/rollout_pruning.md.
"""
