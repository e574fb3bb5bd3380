"""Rollout CPU time with a group's prompt cached once per group against one copy per row.

What is measured: the default recipe's `micro` model and prompts lengthened with one fixed
instruction (as `benchmarks/vs_trl.py --prompt-tokens` does), cut to their last `P` tokens for each
P of `--widths`; 8 prompts x 8 rows, each group's rows together (as `rollout_groups` sends them),
64 forced new tokens, temperature 1. Both variants prefill each distinct prompt once; they differ in
the decode steps: "copied" gives every row its own copy of the prompt's keys and values (one
attention call per layer), "shared" keeps one per group and attends in two parts
(`FusedLlamaDecoder.prefill_shared`). The engine picks shared from `MIN_SHARED_PROMPT` tokens on;
here each variant is forced by setting that threshold. CPU time, median of interleaved rounds.

Then turn 2 of a multi-turn group: each row is its ~260-token prompt followed by its own first turn
(32-64 random tokens), so no two rows are equal, but each group's rows share the prompt (and all
rows the instruction). "shared once" is the engine (the prefill computes a shared token once and
copies its keys and values); "every row" computes every row's whole prompt, as before.

    python benchmarks/shared_prompt_rollout.py [--widths 7,16,32,64,128,256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_trl import benchmark_setup  # noqa: E402

import torch  # noqa: E402

import reinforge.engines.llama_decoder as llama_decoder  # noqa: E402
import reinforge.engines.torch_engine as torch_engine  # noqa: E402
from reinforge.engines.base import SamplingParams  # noqa: E402
from reinforge.runtime.process_settings import configure_process  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", default="7,16,32,64,128,256", help="prompt lengths in tokens")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds after one warm-up")
    args = parser.parse_args()
    configure_process(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    widths = [int(w) for w in args.widths.split(",")]
    _, tasks, model, tokenizer, env = benchmark_setup(new_tokens=64, prompt_tokens=max(widths))
    engine = torch_engine.TorchEngine(model.eval(), tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=64, temperature=1.0)
    prompts = [env.episode().reset(task) for task in tasks.train[:8]]
    print("micro model, 8 prompts x 8 rows, 64 new tokens, 1 thread, CPU-s per rollout")
    print("| prompt tokens | copied per row | shared per group | x |")
    print("|---|---|---|---|")
    for width in widths:
        rows = [p[-width:] for p in prompts for _ in range(8)]
        times: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(args.rounds + 1):
            for shared in (False, True):
                torch_engine.MIN_SHARED_PROMPT = 1 if shared else 1 << 30
                start = time.process_time()
                engine.generate(rows, params, seed=round_)
                if round_:
                    times[shared].append(time.process_time() - start)
        copied, shared = statistics.median(times[False]), statistics.median(times[True])
        print(f"| {width} | {copied:.3f} | {shared:.3f} | {copied / shared:.2f} |", flush=True)

    g = torch.Generator().manual_seed(0)
    turn_two = [p + torch.randint(3, len(tokenizer), (int(torch.randint(32, 65, (), generator=g)),), generator=g).tolist() for p in prompts for _ in range(8)]
    shares_prefixes = llama_decoder.first_rows_with_prefix

    def every_row_alone(input_ids, valid):  # each row the first with its prefix: nothing shared
        return torch.arange(len(input_ids))[:, None].expand_as(input_ids)

    times = {False: [], True: []}
    for round_ in range(args.rounds + 1):
        for shared in (False, True):
            llama_decoder.first_rows_with_prefix = shares_prefixes if shared else every_row_alone
            start = time.process_time()
            engine.generate(turn_two, params, seed=round_)
            if round_:
                times[shared].append(time.process_time() - start)
    alone, shared = statistics.median(times[False]), statistics.median(times[True])
    print(f"turn 2 of a multi-turn group ({sum(map(len, turn_two)) / len(turn_two):.0f} prompt tokens per row): "
          f"every row {alone:.3f}, shared once {shared:.3f} CPU-s per rollout, {alone / shared:.2f}x")


if __name__ == "__main__":
    main()
