"""What a frozen pool member costs on CPU: loading its weights on demand vs one resident engine per member.

The opponent pool (reinforge.games.pool) plays every member through ONE extra model, loading a
member's weights before its batched call of a round (reinforge.games.frozen_players). The other
way would keep one engine (one model) per member resident and switch by pointer. Printed, for a
tiny Llama of the given preset:

- memory: one member's weights; on demand the pool keeps N state dicts and one frozen model (N + 1
  copies), resident engines would keep N models (N copies, each with its decoder);
- time: one weight swap (load_state_dict + the fused decoder's rebuild on the next call) against
  one batched generate call of a training round (`--batch` rows of a tic-tac-toe prompt, up to 4
  new tokens: the recipe's move), so the on-demand overhead per round and member reads as a fraction.

    python benchmarks/opponent_pool_cost.py --preset micro --members 4 --batch 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.games.frozen_players import FrozenPlayers
from reinforge.games.pool import OpponentPool, OpponentPoolSpec
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer


def megabytes(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="micro")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = train_tokenizer(["Tic-tac-toe. You are O. Reply with an open cell number. Board X23/456/789. Open 2 3 4 5 6 7 8 9. Your move:"] * 50)
    model = build_tiny_llama(tokenizer, args.preset, seed=0).eval()
    pool = OpponentPool(OpponentPoolSpec(size=args.members), seed=0)
    for step in range(args.members):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        pool.snapshot(step, model)
    engine = TorchEngine(model, tokenizer.pad_token_id)
    players = FrozenPlayers(pool, engine)
    engines = players.engines()
    prompt = tokenizer("Tic-tac-toe. You are O. Reply with an open cell number. Board X23/456/789. Open 2 3 4 5 6 7 8 9. Your move:").input_ids
    prompts, params = [prompt] * args.batch, SamplingParams(4, 1.0)

    names = list(engines)
    swap_and_call, call_only = [], []
    for r in range(args.repeats):
        name = names[r % len(names)]
        players.loaded = None if r % 2 == 0 else players.loaded  # even repeats: force a swap
        start = time.perf_counter()
        engines[name].generate(prompts, params, seed=r)
        (swap_and_call if r % 2 == 0 else call_only).append(time.perf_counter() - start)
    swaps = []
    for r in range(args.repeats):
        start = time.perf_counter()
        players.loaded = None
        players._load(names[r % len(names)])
        swaps.append(time.perf_counter() - start)

    member_mb = megabytes(pool.members[0].weights.values())
    print(f"preset {args.preset}: {sum(p.numel() for p in model.parameters()):,} parameters")
    print(f"memory: one member's weights {member_mb:.1f} MiB; loading on demand keeps {args.members} state dicts + one "
          f"frozen model = {(args.members + 1) * member_mb:.1f} MiB, one resident engine per member would keep "
          f"{args.members} models = {args.members * member_mb:.1f} MiB (plus a decoder each)")
    swap, call = statistics.median(swaps), statistics.median(call_only)
    print(f"time: weight swap {1000 * swap:.1f} ms (median of {len(swaps)}); batched call of {args.batch} rows, weights loaded: "
          f"{1000 * call:.1f} ms; swap + call {1000 * statistics.median(swap_and_call):.1f} ms; "
          f"on-demand overhead per member per round: {swap / call:.1%} of a call")


if __name__ == "__main__":
    main()
