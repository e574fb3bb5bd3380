"""The vLLM engine process: vLLM's offline `LLM`, driven over a pipe by `vllm_engine.VllmEngine`.

Runs in a child process of the trainer (spawned, so it can be killed when vLLM hangs) and holds
one `vllm.LLM` with vLLM's engine core in this same process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
so the model the weights are loaded into is here, reachable without a second hop.

Requests, one at a time, each a tuple (op, payload); every answer is ("ok", result) or
("error", traceback text):
- ("load", (count, version)), then `count` messages (name, tensor), one tensor each (in the
  Hugging Face checkpoint's names): reload the weights in place through the worker's
  `reload_weights` (no restart, no disk), reading each tensor from the pipe as vLLM asks for the
  next, so neither process holds the whole state pickled; answers (version, checksum of the tensors
  received).
- ("generate", (prompts, params, seeds, max_tokens, full_vocab, stop_when)): one completion per
  prompt, as (token ids, log-probs, finish reason). With a partial-rollout stop rule `stop_when`
  the requests are stepped one engine step at a time and the running ones aborted once the rule
  fires, replayed in lock-step (reinforge.engines.lockstep_stop): a row cut short comes back with
  the tokens it keeps and finish reason "aborted".
- ("close", None): answers, then the process exits.
"""

from __future__ import annotations

import itertools
import os
import traceback
from typing import Any

import torch

from reinforge.engines.lockstep_stop import LockstepStop
from reinforge.engines.weight_sync import add_to_checksum, checksum_digest

_request_ids = itertools.count()  # request ids of stepped calls, unique over the process's life


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
            result = _load(llm, conn, *payload) if op == "load" else _generate(llm, *payload)
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


def _load(llm, conn, count: int, version: int) -> tuple[int, str]:
    digest = checksum_digest()

    def received():
        for _ in range(count):
            name, tensor = conn.recv()
            add_to_checksum(digest, name, tensor)
            yield name, tensor

    stream = received()
    try:
        llm.collective_rpc(lambda worker: worker.reload_weights(weights_iterator=stream))
    finally:
        for _ in stream:  # what vLLM did not read (or all of it, after a failure): the pipe's next message is a request
            pass
    llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
    return version, digest.hexdigest()


def _generate(
    llm, prompts: list[list[int]], params: dict, seeds: list[int | None], max_tokens: list[int], full_vocab: bool, stop_when=None,
):
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
    tokens = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    if stop_when is None:
        completions = [out.outputs[0] for out in llm.generate(tokens, requests, use_tqdm=False)]
        return [_result(c, len(c.token_ids), c.finish_reason, full_vocab) for c in completions]
    return _generate_until(llm, tokens, requests, LockstepStop(stop_when, len(prompts)), full_vocab)


def _generate_until(llm, prompts: list, requests: list, stop: LockstepStop, full_vocab: bool) -> list:
    """Step vLLM's engine until every request finished or the stop rule fired (then abort the rest)."""
    engine = llm.llm_engine
    ids = [f"reinforge-{next(_request_ids)}" for _ in prompts]
    row = {request_id: i for i, request_id in enumerate(ids)}
    for request_id, prompt, request in zip(ids, prompts, requests):
        engine.add_request(request_id, prompt, request)  # output kind CUMULATIVE: each output holds all tokens so far
    latest: list[Any] = [None] * len(prompts)
    finished = [False] * len(prompts)
    try:
        while engine.has_unfinished_requests():
            for out in engine.step():
                latest[row[out.request_id]], finished[row[out.request_id]] = out, out.finished
            lengths = [len(out.outputs[0].token_ids) if out is not None else 0 for out in latest]
            if stop.update(lengths, finished) is not None:
                break
    finally:  # the rule fired, or the call failed: no request may stay in the engine for the next call
        running = [request_id for request_id, done in zip(ids, finished) if not done]
        if running:
            engine.abort_request(running)
    results = []
    for out, done in zip(latest, finished):
        completion = out.outputs[0]
        keep, aborted = stop.cut(len(completion.token_ids), done)
        results.append(_result(completion, keep, "aborted" if aborted else completion.finish_reason, full_vocab))
    return results


def _result(completion, keep: int, reason: str, full_vocab: bool) -> tuple[list[int], Any, str]:
    """(token ids, log-probs, finish reason) of a completion's first `keep` tokens."""
    ids = list(completion.token_ids)[:keep]
    steps = list(completion.logprobs)[:keep]
    if full_vocab:  # every token's log-prob per step: [steps, vocab], the caller rescales
        return ids, [[step[t].logprob for t in sorted(step)] for step in steps], reason
    return ids, [step[t].logprob for step, t in zip(steps, ids)], reason
