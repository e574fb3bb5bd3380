"""The vLLM engine process: vLLM's offline `LLM`, driven over a pipe by `vllm_engine.VllmEngine`.

Runs in a child process of the trainer (spawned, so it can be killed when vLLM hangs) and holds
one `vllm.LLM` with vLLM's engine core in this same process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
so the model the weights are loaded into is here, reachable without a second hop.

Requests, one at a time, each a tuple (op, payload); every answer is ("ok", result) or
("error", traceback text):
- ("load", (state, version)): reload the weights in place from `state` (name -> tensor, in the
  Hugging Face checkpoint's names) through the worker's `reload_weights` (no restart, no disk);
  answers (version, checksum of the tensors received).
- ("generate", (prompts, params, seeds, max_tokens, full_vocab)): one completion per prompt.
- ("close", None): answers, then the process exits.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import torch


def serve(conn: Any, spec: dict) -> None:
    """The child's main loop; `spec` is what `VllmEngine` starts vLLM with (see there)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core here, where the weights go
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(spec["kv_cache_gib"])  # engine.kv_cache_gib (read on CPU only)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if spec["threads"] is not None:  # before vLLM's CPU worker locks torch.set_num_threads
        torch.set_num_threads(spec["threads"])
    try:
        llm = _start(spec)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it with context
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            op, payload = conn.recv()
        except EOFError:  # the parent is gone: nothing left to serve
            return
        try:
            if op == "close":
                conn.send(("ok", None))
                return
            result = _load(llm, *payload) if op == "load" else _generate(llm, *payload)
        except BaseException:  # noqa: BLE001 - one failed call is the caller's error, not the end of the engine
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("ok", result))


def _start(spec: dict):
    from vllm import LLM

    kwargs: dict[str, Any] = dict(
        model=spec["model_dir"],
        skip_tokenizer_init=True,  # token ids in and out: vLLM never sees text
        load_format="dummy",  # the learner's weights arrive through `load` right after, from memory
        dtype=spec["dtype"],
        enforce_eager=spec["enforce_eager"],
        max_model_len=spec["max_model_len"],
        logprobs_mode=spec["logprobs_mode"],
        max_logprobs=-1,  # the full-vocabulary path (see VllmEngine) asks for every log-prob
        seed=0,
    )
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():  # a GPU: its KV cache in bytes, the rest left to the model
        kwargs["kv_cache_memory_bytes"] = int(spec["kv_cache_gib"] * 2**30)
    return LLM(**kwargs)


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    from reinforge.distributed.ray_engine import state_checksum as checksum

    return checksum(state)


def _load(llm, state: dict[str, torch.Tensor], version: int) -> tuple[int, str]:
    def reload(worker) -> None:
        worker.reload_weights(weights_iterator=iter(state.items()))

    llm.collective_rpc(reload)
    llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
    return version, state_checksum(state)


def _generate(llm, prompts: list[list[int]], params: dict, seeds: list[int | None], max_tokens: list[int], full_vocab: bool):
    from vllm import SamplingParams, TokensPrompt

    requests = [
        SamplingParams(
            max_tokens=budget,
            temperature=params["temperature"],
            top_p=params["top_p"],
            top_k=params["top_k"] or -1,  # ours: 0 disables; vLLM's: -1
            stop_token_ids=list(params["stop_token_ids"]),
            ignore_eos=True,  # only the caller's stop tokens end a completion, as in TorchEngine
            logprobs=-1 if full_vocab else 0,  # 0: the sampled token's own log-prob only
            seed=seed,
            detokenize=False,
        )
        for seed, budget in zip(seeds, max_tokens)
    ]
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], requests, use_tqdm=False)
    results = []
    for out in outputs:
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        if full_vocab:  # every token's log-prob per step: [steps, vocab], the caller rescales
            rows = [[step[t].logprob for t in sorted(step)] for step in completion.logprobs]
            logprobs: Any = rows
        else:
            logprobs = [step[t].logprob for step, t in zip(completion.logprobs, ids)]
        results.append((ids, logprobs, completion.finish_reason))
    return results
