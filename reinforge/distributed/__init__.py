"""Scaling out behind the same protocols: Ray actors for rollout engines and reward workers
(`ray_engine`, `ray_rewards`, started by `ray_cluster`), and a data-parallel policy learner over
torch.distributed (`ddp`). Ray is an optional dependency (`pip install reinforge[ray]`); nothing
here imports it until a Ray component is built."""
