"""Train the tiny arithmetic reward model and save it: python scripts/train_tiny_reward_model.py OUT_DIR"""

from __future__ import annotations

import argparse

import torch

from reinforge.rewards.tiny_reward_model import train_tiny_reward_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny models: per-op overhead dominates, one thread is fastest
    print(train_tiny_reward_model(args.out_dir, steps=args.steps, seed=args.seed))


if __name__ == "__main__":
    main()
