"""The config schema, validated before any compute (loading.py reads recipes and overrides into it).

One pydantic model per section; unknown keys are errors (`extra="forbid"`), so a typo in a
recipe or on the command line is reported with its dotted name before a model is loaded.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from reinforge.config.algo_schema import AlgoConfig
from reinforge.config.monitor_schema import MonitorConfig
from reinforge.config.policies_schema import PolicyConfig, check_policy_names, default_policies, policies_from_names
from reinforge.config.section import ConfigError, Section


class LoraConfig(Section):
    """LoRA adapters (Hu et al. 2021, arXiv:2106.09685) trained by RL instead of every weight (needs `pip install reinforge[lora]`)."""

    r: int = Field(8, gt=0, description="Rank of each adapter (B: out x r, A: r x in).")
    alpha: float = Field(16.0, gt=0, description="Scale numerator: an adapter adds (alpha / r) * B @ A to its layer's weight.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Names (last dotted part) of the linear layers that get an adapter; checked against the model before compute.",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on an adapter's input (off while RL samples and updates, which run in eval mode).")


class ModelConfig(Section):
    path: str | None = Field(
        None,
        description="The policy's starting model: a local Hugging Face directory, a Hub id (org/name; HF_HOME, HF_HUB_CACHE, "
        "HF_HUB_OFFLINE honoured), a .gguf file (converted once into $REINFORGE_CACHE_DIR/gguf) or a `reinforge model fetch` "
        "name (smollm2-135m-instruct). None builds a tiny Llama locally.",
    )
    preset: str = Field("micro", description="Size preset of the locally built tiny Llama (see reinforge.models.tiny_llama).")
    vocab_size: int = Field(384, gt=0, description="Vocabulary size of the tokenizer trained in-process.")
    max_positions: int = Field(128, gt=0, description="Context length of the locally built model.")
    lora: LoraConfig | None = Field(
        None,
        description="RL trains LoRA adapters only (the supervised warm-up stays full-parameter); the reference is the base with "
        "adapters disabled (after an algo.ref_reset_every reset, the base plus a copy of the adapters), the engine samples from merged weights, checkpoints hold the adapter, final/ the merged model "
        "(and the adapter in final/adapter). None: full fine-tuning. On the command line: model.lora.r=8.",
    )
    device: str = Field(
        "cpu", description="Where the policy (engine, learner, reference, critic) runs: cpu, cuda or cuda:N (checked before compute)."
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
            raise ValueError("device must be cpu, cuda or cuda:N")
        return device


class TaskConfig(Section):
    source: str = Field("arithmetic", description="Task source: arithmetic | jsonl | hf_dataset | reasoning_gym | game (game setups for env.type=game, docs/games.md) | text_game (puzzles of single-agent text games for env.type=text_game: wordle, twenty_questions, maze; docs/games.md), or your own by import path ('pkg.module:load', './tasks.py:load'; docs/extending.md).")
    dataset: str | None = Field(None, description="reasoning-gym dataset name (source=reasoning_gym).")
    params: dict[str, Any] = Field(default_factory=dict, description="Source parameters (arithmetic knobs, reasoning-gym dataset config).")
    path: str | None = Field(
        None,
        description="Training tasks: a JSONL file (source=jsonl); a local Parquet / Arrow / CSV / JSON(L) file, glob or directory, "
        "or a save_to_disk directory (source=hf_dataset, see docs/datasets.md).",
    )
    eval_path: str | None = Field(None, description="Held-out tasks, in the same forms as task.path; default: split off the training data.")
    split: str | None = Field(None, description="Split of task.path to train on (source=hf_dataset); default: train, or the only split there is.")
    eval_split: str | None = Field(
        None, description="Split to hold out (source=hf_dataset), of task.eval_path when set, else of task.path; default: eval_size tasks split off the training split."
    )
    prompt_field: str = Field("prompt", description="Column holding the prompt, text or chat messages (source=hf_dataset).")
    answer_field: str = Field("answer", description="Column holding the reference answer (source=hf_dataset).")
    id_field: str | None = Field(None, description="Column holding unique task ids (source=hf_dataset); default: SPLIT/ROW.")
    solution_field: str | None = Field(
        None, description="Column holding the warm-up demonstration, text or chat messages (source=hf_dataset); default: the answer."
    )
    messages_field: str | None = Field(
        None,
        description="Column holding whole conversations (source=hf_dataset): leading system/user messages are the prompt, the rest the "
        "demonstration (tool calls included); replaces prompt_field.",
    )
    answer_format: Literal["plain", "gsm8k"] = Field(
        "plain", description="plain: the answer as is; gsm8k: the answer follows '#### ', the text before it is the worked solution (source=hf_dataset)."
    )
    verifier: str | None = Field(None, description="Verifier of every task (source=hf_dataset); default: numeric with answer_format=gsm8k, else exact.")
    train_size: int = Field(20000, gt=0, description="Number of training tasks (generated sources).")
    eval_size: int = Field(500, gt=0, description="Number of held-out tasks.")
    # The run's trainable policy names (Config.policies), which a game's seats name: set by Config,
    # so a task source reads them from the task section it is given (a bare TaskConfig: `policy`).
    _policy_names: list[str] = PrivateAttr(default_factory=lambda: ["policy"])

    @property
    def policy_names(self) -> list[str]:
        return list(self._policy_names)
    system_prompt: str | None = Field(
        None,
        description="System message put first in every task's prompt (replacing one the task data brings); null: none, so the chat "
        "template's own default applies (SmolLM2's names itself); '' an empty one. Needs chat prompts (rollout.prompt_format "
        "chat, or auto with a tokenizer that has a chat template). Not for source=game / text_game, whose envs write their prompts.",
    )
    instruction: str | None = Field(
        None,
        description="Text added to every task's question (the last user message of a chat prompt), after a blank line, or in place "
        "of '{question}' when it holds one (e.g. 'What is {question}? End with: The answer is N.'); null: the source's own "
        "(reasoning_gym: 'Give your final answer inside <answer></answer> tags.'; the others: none); '' none at all.",
    )
    answer_extractor: Literal["response", "auto", "answer_tags", "boxed", "gsm8k", "last_number"] | None = Field(
        None,
        description="Where verifiers find the final answer in a response (reinforge.tasks.answer_extraction): response = the "
        "last <answer></answer> content, else the whole response (bare answers); answer_tags; boxed = the last \\boxed{}; gsm8k = "
        "after the last '####'; last_number; auto = tags, else boxed, else ####, else the last number (numeric tasks) or the whole "
        "response. The strict format is reward fn answer_format. null: each task's own (response, unless the source sets it).",
    )


class SFTConfig(Section):
    steps: int = Field(1500, ge=0, description="Supervised warm-up steps before RL (0 skips the warm-up).")
    batch_size: int = Field(64, gt=0, description="Examples per supervised step.")
    lr: float = Field(1e-3, gt=0, description="Peak learning rate of the warm-up (AdamW).")
    warmup_steps: int = Field(50, ge=0, description="Linear learning-rate warm-up steps, then cosine decay to sft.steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay of the warm-up.")


class RolloutConfig(Section):
    prompts_per_step: int = Field(32, gt=0, description="Distinct tasks sampled per RL step.")
    group_size: int = Field(8, gt=0, description="Completions sampled per task (the GRPO group).")
    max_new_tokens: int = Field(16, gt=0, description="Cap on tokens sampled per completion (finish reason: length).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; log-probs are taken at this temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass; 1.0 disables.")
    top_k: int = Field(0, ge=0, description="Top-k sampling: keep the k most likely tokens; 0 disables.")
    prompt_format: Literal["auto", "raw", "chat"] = Field(
        "auto", description="raw: prompt text as is; chat: tokenizer chat template; auto: chat when the tokenizer has one."
    )
    engine_dtype: Literal["float32", "bfloat16"] = Field("float32", description="Dtype of the sampling engine's weight copy.")


class EngineConfig(Section):
    """The sampling engine behind the Engine protocol: our PyTorch sampler, or vLLM (reinforge.engines.vllm_engine)."""

    type: Literal["torch", "vllm"] = Field(
        "torch", description="torch: our in-process PyTorch sampler; vllm: vLLM's offline engine in a child process (needs `pip install 'reinforge[vllm]'`; the weight dtype is rollout.engine_dtype)."
    )
    kv_cache_gib: int = Field(
        1, gt=0, description="vLLM's KV-cache size in GiB (on CPU VLLM_CPU_KVCACHE_SPACE, on a GPU kv_cache_memory_bytes); keep it small on a shared machine."
    )
    startup_timeout_s: float = Field(
        600.0, gt=0, description="Deadline of vLLM's start-up (model build and first weight load); past it the engine process is killed and the run stops."
    )
    timeout_s: float = Field(
        600.0, gt=0, description="Deadline of one vLLM call (generate, weight sync); past it the engine process is killed and the call raises."
    )
    enforce_eager: bool = Field(
        True, description="vLLM without CUDA graphs / torch.compile: starts in seconds instead of minutes; set false on a GPU for speed."
    )
    decode_kernels: Literal["auto", "torch", "native"] = Field(
        "auto",
        description="type=torch, a decode step on CPU in float32: native = its attention, RMSNorm, rotary and SwiGLU in C, compiled on first use with the machine's C compiler (reinforge.kernels; the micro model's rollout ~1.4x); torch = torch's ops (SDPA); auto = native on one torch thread when a compiler is there, else torch.",
    )


class EnvConfig(Section):
    """The environment episodes run in: one response, or a multi-turn agent with tools."""

    type: str = Field(
        "single_turn",
        description="single_turn: one response per task; tool: multi-turn episodes with tool calls (chat format); game: multi-player text games (task.source=game, docs/games.md); text_game: single-agent text games, Wordle, twenty questions, a maze (task.source=text_game, docs/games.md); gateway: your agent program written against the OpenAI client (env.agent; docs/gateway.md); or your own env class by import path ('pkg.module:MyEnv', './env.py:MyEnv'; docs/extending.md), or a gym / GEM, SkyRL, TRL or verifiers env by import path (docs/adapters.md).",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of your own env class (env.type given by import path).")
    tools: list[str] = Field(
        default_factory=list,
        description="Tools of a tool env: built-in calculator, python, sql, search, or your own typed, docstringed function by import path ('pkg.tools:count_vowels').",
    )
    tool_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-tool options, e.g. {sql: {db_path: data.db}, search: {documents: docs.jsonl}}."
    )
    tool_format: Literal["compact", "hermes"] = Field(
        "compact", description="Tool-call syntax: compact <<name: args>> (easy for tiny models) or hermes <tool_call>{json}</tool_call>."
    )
    max_turns: int = Field(4, gt=0, description="Policy turns per episode (finish reason: max_turns); env.type=gateway: model calls per agent episode.")
    max_episode_tokens: int | None = Field(
        None, gt=0, description="Cap on an episode's whole token sequence (finish reason: max_tokens); default: the model's context."
    )
    max_observation_tokens: int = Field(64, gt=0, description="Tool results longer than this many tokens are cut (and marked).")
    tool_timeout_s: float | None = Field(
        None, gt=0, description="Timeout of one tool call (a call past it becomes an error observation); default: each tool's own."
    )
    valid_call_reward: float = Field(0.0, description="Per-turn reward for a tool call that ran without error (a process reward).")
    workers: int = Field(8, gt=0, description="Threads stepping episodes (running tools) at once.")
    agent: str | None = Field(
        None,
        description="env.type=gateway: your agent, `async def agent(task, client, **env.params) -> result` (or a plain function), by import path ('my_pkg.agent:solve'); it runs in a separate process with an openai client pointed at the run's gateway (docs/gateway.md).",
    )
    agent_tools: str | None = Field(
        None,
        description="env.type=gateway: import path of the agent's list of OpenAI tool schemas, used only to lay out warm-up demonstrations and budget checks the way the agent's first request renders (the chat template is given these tools).",
    )
    agent_timeout_s: float = Field(
        60.0, gt=0, description="env.type=gateway: wall-clock limit of one agent episode; past it the episode fails (counted, left out of the loss)."
    )
    agent_concurrency: int = Field(256, gt=0, description="env.type=gateway: agent episodes running at once in the agent process.")
    gateway_window_ms: float = Field(
        50.0, gt=0, description="env.type=gateway: batching window: model requests keep joining one batched engine call until none has arrived for this long (the oldest waits at most 10 windows)."
    )


class CriticConfig(Section):
    """A learned value function, for critic-based estimators (gae)."""

    enabled: bool = Field(False, description="Train a value model alongside the policy.")
    trunk: Literal["policy_copy", "separate"] = Field("policy_copy", description="Value head on a copy of the policy trunk, or on a separate tiny model.")
    preset: str = Field("nano", description="Tiny Llama preset of a separate trunk.")
    lr: float = Field(1e-4, gt=0, description="Value model learning rate (AdamW).")
    loss: str = Field("mse", description="Value loss: mse (clipped), hl_gauss (classification, Farebrother et al. 2024).")
    clip_eps: float | None = Field(0.2, gt=0, description="Value clipping range; None disables.")
    num_bins: int = Field(51, gt=1, description="Bins of the hl_gauss value head.")
    support: tuple[float, float] = Field((-1.5, 1.5), description="Return range covered by the hl_gauss bins.")


class PromptValueConfig(Section):
    """A prompt-value model (V0-style) that predicts the policy's pass rate on a prompt before sampling it
    (reinforge.values, docs/value_models.md); it picks prompts (PCL) and can serve as the advantage
    baseline's prior (algo.advantage=v05_prior)."""

    enabled: bool = Field(False, description="Train a prompt-value model online from every step's groups and log its calibration (value/*).")
    hidden: int = Field(64, gt=0, description="Width of the value model's hidden layer (an MLP on the policy's detached prompt states and the recent-results summary).")
    lr: float = Field(3e-3, gt=0, description="Value model learning rate (AdamW).")
    updates_per_step: int = Field(20, gt=0, description="Gradient steps of the value model per RL step, on the replay buffer of recent groups.")
    buffer_groups: int = Field(512, gt=0, description="Most recent groups kept to train the value model on (older outcomes describe an older policy).")
    memory_groups: int = Field(128, gt=0, description="Most recent groups the policy summary is computed from (V0's context of the policy's results).")
    component: str | None = Field(
        None, description="Reward component whose score, clipped to [0, 1], is a sample's success; default: the total reward clipped to [0, 1]."
    )
    curriculum: Literal["uniform", "pcl", "dump"] = Field(
        "uniform",
        description="Which prompts a step samples: uniform (the shuffled order, as without this section); pcl (score prompt_value.pool_factor x the prompts needed and keep those whose predicted pass rate is nearest prompt_value.target; needs enabled); dump (a UCB over the task distributions named by prompt_value.dump_key, by their mean |advantage|).",
    )
    pool_factor: int = Field(4, ge=1, le=64, description="PCL: candidates scored per prompt sampled.")
    target: float = Field(0.5, gt=0, lt=1, description="PCL: the predicted pass rate to pick prompts nearest to (0.5 maximizes a binary reward's variance).")
    dump_key: str = Field("family", description="DUMP: the task metadata key whose values are the distributions (arithmetic: family, digits).")
    dump_c: float = Field(1.0, ge=0, description="DUMP: UCB exploration weight c in mean|A| + c sqrt(2 ln N / n).")
    dump_window: int = Field(64, gt=0, description="DUMP: per distribution, the most recent groups whose mean |advantage| is its learnability.")
    dump_temperature: float = Field(0.1, gt=0, description="DUMP: softmax temperature over the distributions' UCB scores.")
    prior_test_z: float | None = Field(
        2.0, gt=0, description="v05_prior: reject the prior for a group whose empirical mean lies more than z standard errors from it (baseline = the empirical mean); None never rejects."
    )
    prior_var_floor: float = Field(0.01, gt=0, description="v05_prior: lower bound of the prior's error variance tau^2.")


class RewardComponent(Section):
    name: str = Field(description="Unique component name; its score is logged as reward/<name>/mean.")
    fn: str = Field(description="Reward function: a built-in name (reinforge.rewards.builtin, reinforge.rewards.group) or your own function or class by import path ('pkg.rewards:score', './rewards.py:score').")
    weight: float = Field(1.0, description="Weight of this component in the combined reward.")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the reward function.")


class RewardGate(Section):
    part: str = Field(description="Component whose score is gated.")
    requires: str = Field(description="Component that must reach `threshold` for `part` to count (else `part` contributes 0).")
    threshold: float = Field(description="Minimum score of `requires`, inclusive.")


class RewardConfig(Section):
    components: list[RewardComponent] = Field(
        default_factory=lambda: [RewardComponent(name="correct", fn="verifier", weight=1.0)],
        description="Reward components (name, fn, weight, params), combined by weight (gdpo normalizes each before weighting).",
    )
    timeout_s: float = Field(
        10.0, gt=0, description="Per-call timeout of each reward function and of each verifier call in evaluation; a call past it is stopped (its worker process killed) and counted as a failure."
    )
    workers: int = Field(4, gt=0, description="Reward calls running at once (reward worker processes, or threads with isolation=thread).")
    isolation: Literal["process", "thread"] = Field(
        "process",
        description="Where reward functions and verifiers run: process = worker processes that a timeout kills (a hung or GIL-holding reward cannot hang the run; functions are sent by name + params); thread = threads of the trainer (a hung call is abandoned, a GIL-holding one cannot be stopped). Stateful rewards and reward models always run in-process.",
    )
    on_error: Literal["drop", "fallback"] = Field(
        "drop",
        description="A sample whose reward failed (timeout, raised, worker died): drop = left out of the loss (with its whole group for group-relative estimators), counted in reward_dropped and the report; fallback = trained on with reward.fallback as that component's score.",
    )
    max_error_fraction: float = Field(
        0.5, ge=0, le=1, description="Stop the run when more than this fraction of a batch's reward calls fail."
    )
    combine: Literal["weighted_sum", "product"] = Field(
        "weighted_sum",
        description="How components make the total: weighted_sum = sum of weight*score; product = product of weight*score (any 0 makes it 0).",
    )
    gates: list[RewardGate] = Field(
        default_factory=list, description="Gates (part, requires, threshold): `part` counts only when `requires` >= threshold."
    )
    clip: tuple[float, float] | None = Field(None, description="Clip the combined reward to [low, high]; None disables.")
    fallback: float = Field(0.0, description="Score a component gets for a sample when its function raises or times out (trained on only with on_error=fallback).")
    cache: bool = Field(
        True, description="Cache scores of deterministic components by (task id, response, finish reason, token count, component); a reward fn opts out with `deterministic = False`."
    )

    @field_validator("clip")
    @classmethod
    def _ordered_clip(cls, clip: tuple[float, float] | None) -> tuple[float, float] | None:
        if clip is not None and clip[0] > clip[1]:
            raise ValueError(f"clip needs low <= high, got {list(clip)}")
        return clip


class EvalConfig(Section):
    every: int = Field(50, gt=0, description="Evaluate on held-out tasks every N RL steps (and at start and end).")
    samples: int = Field(4, gt=0, description="Sampled completions per task for mean@k.")
    max_new_tokens: int | None = Field(None, description="Cap on tokens per held-out completion; default: rollout.max_new_tokens.")


class TrainerConfig(Section):
    steps: int = Field(200, ge=0, description="RL steps.")
    # Below 2**32: per-step sampling seeds are seed * 16,000,048 + ..., and torch takes seeds below 2**64.
    seed: int = Field(0, ge=0, lt=2**32, description="Seed of model init, task generation, sampling and shuffling (0 <= seed < 2**32).")
    output_dir: str | None = Field(None, description="Run directory; default runs/<timestamp>.")
    sample_every: int = Field(25, gt=0, description="Write sample trajectories every N steps.")
    threads: int | None = Field(
        1, description="torch intra-op threads of this process (and of the vLLM engine's, engine.type=vllm). Default 1: on a shared machine a second OpenMP thread spin-waits against other work and steps run up to 10x slower (docs/running.md, 'Threads'); set N to pin N threads on a machine of your own (2 is ~1.5x faster on an idle 2-core box), null for torch's choice (one per core)."
    )
    cpus: list[int] | None = Field(
        None, description="Pin this process (and the threads it starts) to these CPU cores, e.g. [0, 1]: keeps two runs on one machine off each other's cores. Default: every core the process may use."
    )
    retain_freed_memory: bool = Field(
        True, description="Keep freed memory mapped for the next step instead of returning it to the kernel (glibc mallopt), which otherwise page-faults every activation tensor in again each step: the update of a 17M-parameter model 1.18x faster, median of 3 rounds (docs/benchmarks.md, 'reinforge vs TRL'). The process keeps its peak heap. Ignored off glibc or when a MALLOC_* tunable is set."
    )
    memory_check: bool = Field(
        True, description="Before any model is loaded, predict one RL step's peak memory from the model's config.json and these settings (weights, gradients, AdamW state, reference, engine copy and KV cache, activations, log-prob chunks; reinforge.run.memory_fit), print it, and refuse a run that cannot fit the machine's free memory (model.device=cuda: the GPU's), naming the knobs that would make it fit. false skips the check."
    )
    checkpoint_every: int = Field(25, ge=0, description="Write a resumable checkpoint every N RL steps (and at the end); 0 disables.")
    keep_checkpoints: int = Field(2, gt=0, description="How many of the newest checkpoints to keep.")
    schedule: Literal["sync", "async"] = Field(
        "sync", description="sync: sample with the newest weights, then train; async: sample the batches of later steps in a background thread with weights up to trainer.max_staleness versions old while the learner trains (reinforge.trainer.rollout_schedule)."
    )
    max_staleness: int = Field(
        1, ge=0, description="k: no trained token was sampled by weights more than k versions (RL steps) older than the learner's; async samples step s with version s-1-k (s-k with partial rollouts); async with k=0 is exactly sync."
    )
    partial_rollouts: bool = Field(
        False, description="APRIL: start trainer.overprovision x the groups a step needs, stop sampling once enough groups are complete, resume the unfinished ones with newer weights next step; a multi-turn episode (tool env, text games) keeps its env state and resumes mid-turn or at its next turn, a game (env.type=game) between moves or mid-turn (not env.type=gateway)."
    )
    overprovision: float = Field(1.5, ge=1, le=2, description="Groups in flight per step, as a multiple of rollout.prompts_per_step (partial rollouts only).")

    @field_validator("cpus")
    @classmethod
    def _usable_cpus(cls, cpus: Any) -> Any:
        if cpus is None:
            return cpus
        if not cpus or len(set(cpus)) != len(cpus):
            raise ValueError("list each core once, e.g. [0, 1]; leave trainer.cpus unset for every core")
        usable = getattr(os, "sched_getaffinity", lambda _pid: None)(0)
        if usable is not None and not set(cpus) <= usable:
            raise ValueError(f"cores {sorted(set(cpus) - usable)} are not available to this process (available: {sorted(usable)})")
        return cpus

    @field_validator("threads")
    @classmethod
    def _positive_threads(cls, threads: Any) -> Any:
        # torch.set_num_threads(-1) or (0) fails only once the run starts; a count must be >= 1.
        if isinstance(threads, int) and not isinstance(threads, bool) and threads < 1:
            raise ValueError("a thread count must be at least 1; leave trainer.threads unset for the default")
        return threads


class TelemetryConfig(Section):
    progress: bool = Field(True, description="Live progress display (rich).")
    tensorboard: bool = Field(True, description="Also write TensorBoard event files.")
    wandb: Literal["auto", "on", "off"] = Field(
        "off", description="Weights & Biases in offline mode (a local wandb/ folder): on, off (the default: telemetry the user did not ask for stays off), or auto = when the wandb package is installed."
    )

    @field_validator("wandb", mode="before")
    @classmethod
    def _yaml_booleans_as_switch(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted on/off/yes/no/true/false as a boolean, so `telemetry.wandb=off`
        # arrives as False: read the boolean as the switch the user wrote.
        if isinstance(value, bool):
            return "on" if value else "off"
        return value


class WorkersConfig(Section):
    """Scaling out (reinforge.distributed): rollout engines and reward functions as Ray actors, behind the same interfaces."""

    workers: int = Field(0, ge=0, description="Rollout engines run as this many Ray actors, each with a copy of the model; 0 samples in-process. Needs `pip install reinforge[ray]`.")
    reward_workers: int = Field(0, ge=0, description="Reward functions run in this many Ray actors (the scorer, its cache and limits stay in-process; stateful rewards too); 0 runs them in-process.")
    address: str | None = Field(None, description="Address of an existing Ray cluster (host:port, auto or ray://...); None starts a local one that listens on loopback only.")
    timeout_s: float = Field(300.0, gt=0, description="Deadline of a rollout worker's calls (generate, weight sync), of any worker's start and of the data-parallel learners' collectives; past it the run stops with the worker named. Reward calls keep reward.timeout_s.")
    startup_timeout_s: float | None = Field(None, gt=0, description="Deadline of a worker's start instead (a fresh process imports torch and transformers and builds its part first, which on a busy machine can take longer than a step may): rollout and reward workers' first call, data-parallel learners' start. None: workers.timeout_s.")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rollout or reward worker, and for each learner rank placed on Ray (a rollout worker's or learner rank's torch threads too, at least 1).")
    learners: int = Field(1, ge=1, description="Policy learner processes: above 1, the update runs data-parallel over torch.distributed (gloo on CPU, NCCL on GPU); this process is rank 0 and runs the rest of the loop. The update equals the single-process one up to float summation order.")
    sharding: Literal["none", "fsdp"] = Field("none", description="How the workers.learners > 1 ranks hold the policy: none (each a full replica of weights, gradients and AdamW state) or fsdp (FSDP2: each rank 1/N of them, decoder layer by layer; rank 0 keeps a full copy for its engine; docs/scaling.md).")
    fsdp_precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="workers.sharding=fsdp: bf16 computes each layer in bfloat16 (weights all-gathered in bf16, gradients reduced in float32, float32 master weights and AdamW state); fp32 computes in float32; auto: bf16 when model.device is a GPU, fp32 on the CPU (no faster bf16 matmul there; its sharded step matches one process within float32 bounds).")
    fsdp_offload: bool = Field(False, description="workers.sharding=fsdp on a GPU: keep the sharded weights, gradients and AdamW state in host memory (the optimizer steps there) and bring each layer to the GPU for its forward and backward: less GPU memory, more PCIe traffic. Refused on the CPU.")
    learner_placement: Literal["auto", "processes", "ray"] = Field("auto", description="Where learner ranks 1..N-1 (workers.learners > 1) run: processes spawned on this machine, or Ray actors in a placement group (one bundle per rank: workers.cpus_per_worker CPUs, and a GPU when model.device is cuda), on the nodes of the cluster at workers.address. auto: ray when workers.address is set, else processes (docs/scaling.md).")

    @property
    def learners_on_ray(self) -> bool:
        """Whether learner ranks 1..N-1 are Ray actors (workers.learner_placement, auto resolved)."""
        return self.learners > 1 and (self.learner_placement == "ray" or (self.learner_placement == "auto" and self.address is not None))


class SuccessHeadConfig(Section):
    """A head that predicts success from a partial response (ARRoL, docs/rollout_pruning.md): prunes rollouts, votes at evaluation."""

    enabled: bool = Field(False, description="Train the success head online from each step's scored responses (a multi-turn episode: its final turn; trained on the newest policy version's samples; docs/rollout_pruning.md).")
    prune: bool = Field(False, description="Stop rollouts the head predicts will fail, keeping each group balanced; pruned rollouts leave the loss (not scored) and are counted in prune/*.")
    check_every: int | None = Field(None, gt=0, description="Decode steps between pruning checks (the head's training prefixes are the same steps). None: 4, or 1 when rollout.max_new_tokens <= 4 (a game's move of a few tokens is checked once its first token is chosen).")
    min_group_size: int = Field(2, ge=2, description="Pruning never leaves a group with fewer unpruned rollouts than this (at most rollout.group_size).")
    target_ratio: float = Field(0.5, gt=0, lt=1, description="ARRoL's rho: pruning keeps at least S * (1 - rho) / rho predicted failures per group (S: predicted successes), and at least one.")
    fail_below: float = Field(0.5, gt=0, lt=1, description="A prefix whose predicted success is below this is a predicted failure.")
    success_reward: float = Field(1.0, description="A response counts as a success for the head when its reward reaches this.")
    warmup_steps: int = Field(5, ge=0, description="RL steps the head trains before it may prune.")
    hidden: int = Field(0, ge=0, description="Hidden width of the head's MLP; 0: a linear probe.")
    lr: float = Field(0.01, gt=0, description="Adam learning rate of the head.")
    train_steps: int = Field(20, gt=0, description="Adam steps on the example buffer after each RL step.")
    buffer_size: int = Field(4096, gt=0, description="Most recent (prefix, outcome) examples kept for training (saved in checkpoints).")
    eval_voting: bool = Field(True, description="Evaluation also reports majority voting and best-of-n / weighted voting by the head over the eval.samples (needs eval.samples >= 2).")


class ProgressConfig(Section):
    """SPA stepwise progress attribution for multi-turn envs (docs/rollout_pruning.md): per-turn rewards whose sum is the outcome."""

    enabled: bool = Field(False, description="Train a per-turn progress estimator and give its increments to the turn-level estimators as per-turn rewards (multi-turn envs only).")
    lr: float = Field(0.01, gt=0, description="Adam learning rate of the progress estimator.")
    dim: int = Field(32, gt=0, description="Width of the estimator's token-embedding trunk.")
    train_steps: int = Field(20, gt=0, description="Adam steps on the episode buffer after each RL step.")
    buffer_size: int = Field(1024, gt=0, description="Most recent episodes kept for training (saved in checkpoints).")


class Config(Section):
    policies: dict[str, PolicyConfig] = Field(
        default_factory=default_policies,
        description="The trainable policies, name -> options (default: one named `policy`); several play the seats of a game "
        "(task.params.train_seats names them), each its own model, learner and engine (docs/games.md). On the command line: policies=[a, b].",
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    task: TaskConfig = Field(default_factory=TaskConfig, description="Where training and held-out tasks come from.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Supervised warm-up before RL.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling of trajectories.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="The sampling engine (torch or vllm).")
    env: EnvConfig = Field(default_factory=EnvConfig, description="The environment: single-turn, or multi-turn with tools.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="The RL method: advantages, losses, optimizer. The policy runs with dropout off (eval mode) while it samples, is scored and is updated, so the first update's ratio is 1 up to the engine's float rounding; supervised warm-up keeps the model's dropout.")
    critic: CriticConfig = Field(default_factory=CriticConfig, description="Learned value function (gae).")
    prompt_value: PromptValueConfig = Field(default_factory=PromptValueConfig, description="Prompt-value model: predicted pass rates pick prompts (PCL, DUMP) and set baselines (v05_prior).")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward functions and their limits.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The run: steps, seed, output.")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig, description="Progress display and metric sinks.")
    workers: WorkersConfig = Field(default_factory=WorkersConfig, description="Rollout and reward workers on Ray (scaling out).")
    success_head: SuccessHeadConfig = Field(default_factory=SuccessHeadConfig, description="Success prediction from partial responses: rollout pruning and value-guided voting (ARRoL).")
    progress: ProgressConfig = Field(default_factory=ProgressConfig, description="Per-turn progress rewards for multi-turn agents (SPA-RL).")
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Training-health monitors: entropy collapse, KL and log-prob-gap blow-up, clip spikes, response length, reward and format hacking, mode collapse, zero-variance groups (docs/running.md, 'Training-health monitors').")

    @field_validator("policies", mode="before")
    @classmethod
    def _policies_from_names(cls, value):
        return policies_from_names(value)

    @field_validator("policies")
    @classmethod
    def _policy_names(cls, policies: dict[str, PolicyConfig]) -> dict[str, PolicyConfig]:
        return check_policy_names(policies)

    @model_validator(mode="after")
    def _tell_the_task_its_policies(self) -> Config:
        self.task._policy_names = list(self.policies)
        return self

    @field_validator("reward")
    @classmethod
    def _unique_reward_names(cls, reward: RewardConfig) -> RewardConfig:
        names = [c.name for c in reward.components]
        if len(set(names)) != len(names):
            raise ValueError(f"reward component names must be unique, got {names}")
        return reward
