"""The prompt-value side of the loop (issue 17): a model of the policy's pass rate on a prompt, before
any token of it is sampled, and what uses it.

- `value_model`: the V0-style prompt-value model, trained online from every group's outcome.
- `features`: the prompt's representation, the policy's own detached hidden states.
- `calibration`: Brier score and reliability curve of its predictions.
- `selection`: PCL's rule, the prompts whose predicted pass rate is nearest a target.
- `dump`: DUMP's UCB over task distributions.
- `curriculum_sampler`: the trainer's task sampler with all of the above behind `next_batch`.
- `config_check`: settings the value model cannot serve, refused before compute.

The advantage baseline that uses the prediction as a prior (V0.5) is an estimator like the others:
`reinforge.algos.advantages.value_prior`. See docs/value_models.md.
"""
