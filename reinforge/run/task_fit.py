"""Do the tasks fit the run's token budgets? Checked with the run's tokenizer, before any model.

Two things a config cannot show by itself, found only by measuring the tasks:

- a prompt and the response budget must fit the model's context;
- every assistant turn the policy is taught (a demonstration, or the reference answer when a task
  has none) must fit `rollout.max_new_tokens`, the cap on one sampled turn (and
  `eval.max_new_tokens` when set). A longer one is cut every time it is sampled, so RL can never
  produce it: the tool-agent recipe with hermes calls (~40 tokens a call, 24 allowed) scored a
  valid-call rate of 0% without a word. This is refused, not warned about: the run it would start
  cannot learn what it is shown, a warning scrolls away under the progress display, and the fix
  is one key (or dropping the offending rows). Held-out tasks are measured too: what cannot be
  written within the cap cannot be scored right either. With `sft.steps=0` nothing is imitated,
  and only answers that the `exact` verifier needs written out whole are measured.

Sizes are measured twice. First from text length alone (`size_lower_bound`, JSONL files only,
in preflight), which needs no tokenizer work: it finds a 10 MB prompt at once, before a
tokenizer is trained on it or asked to encode it (what took 91 s). Then exactly, with the run's
tokenizer (trained in a fraction of a second for the tiny model), before any model is built.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config, ConfigError
from reinforge.run.env_factory import build_env
from reinforge.envs.single_turn import PromptFormatError
from reinforge.models.loading import ModelLoadError, check_causal_lm_dir, read_model_config
from reinforge.models.model_source import resolve_model_path
from reinforge.models.tokenizer import MAX_TOKEN_CHARS, train_tokenizer
from reinforge.tasks.jsonl_source import read_numbered_tasks
from reinforge.tasks.task import Task, TaskSplits, task_text

# The tokenizer built for a local tiny model is trained on this many training tasks' texts.
TOKENIZER_CORPUS_TASKS = 5000


def run_tokenizer(cfg: Config, tasks: TaskSplits) -> PreTrainedTokenizerBase:
    """The tokenizer the run will use: the model directory's, or the one trained on the tasks."""
    if cfg.model.path is not None:
        try:
            return check_causal_lm_dir(cfg.model.path)[2]
        except ModelLoadError as err:
            raise ConfigError(f"model.path: {err}") from None
    return train_tokenizer([task_text(t) for t in tasks.train[:TOKENIZER_CORPUS_TASKS]], cfg.model.vocab_size)


def model_context(cfg: Config) -> int | None:
    """The policy's context in tokens: its config.json's, or the locally built model's."""
    if cfg.model.path is None:
        return cfg.model.max_positions
    return read_model_config(resolve_model_path(cfg.model.path)).get("max_position_embeddings")


def max_chars_per_token(tokenizer: PreTrainedTokenizerBase) -> int:
    """The most characters of text one token can stand for: its longest vocabulary entry.

    A byte-level BPE entry spells one byte per character, a SentencePiece or WordPiece entry the
    characters themselves (plus a marker such as '▁' or '##'), a byte-fallback entry ('<0x0A>')
    one byte in six characters: in each case an entry is at least as long as the text it covers."""
    return max(len(token) for token in tokenizer.get_vocab())


def size_lower_bound(text: str, chars_per_token: int) -> int:
    """Fewest tokens `text` can encode to when no token covers more than `chars_per_token` characters."""
    return math.ceil(len(text) / chars_per_token)


def prompt_lower_bound(text: str, tokenizer: PreTrainedTokenizerBase | None, chars_per_token: int, room: int) -> int:
    """size_lower_bound of what the tokenizer reads: a text that looks too long is first put
    through the tokenizer's normalizer (linear time), which may merge characters (NFC, NFKC)."""
    bound = size_lower_bound(text, chars_per_token)
    normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
    if bound > room and normalizer is not None:
        bound = size_lower_bound(normalizer.normalize_str(text), chars_per_token)
    return bound


def prompt_text(task: Task) -> str:
    return task.prompt if isinstance(task.prompt, str) else "".join(m["content"] for m in task.prompt)


@dataclass
class Misfit:
    """One task whose text does not fit; `where` says where it came from (a file and line, or an id)."""

    where: str
    tokens: int


def longest_first(misfits: list[Misfit]) -> str:
    worst = sorted(misfits, key=lambda m: -m.tokens)[:3]
    return "; ".join(f"{m.where}: {m.tokens} tokens" for m in worst)


def demonstration_budgets(cfg: Config) -> list[tuple[str, int]]:
    """The caps a taught turn must fit: rollout's, and evaluation's when it sets its own."""
    budgets = [("rollout.max_new_tokens", cfg.rollout.max_new_tokens)]
    if cfg.eval.max_new_tokens is not None:
        budgets.append(("eval.max_new_tokens", cfg.eval.max_new_tokens))
    return budgets


def taught_turns(env, task: Task, imitated: bool) -> list[str]:
    """The assistant turns a run teaches or needs for `task`, as the policy would write them.

    With a warm-up: the demonstration's assistant turns (or the answer). Without one: the answer
    when the `exact` verifier needs it written out whole; nothing otherwise."""
    if not imitated:
        return [task.answer] if task.verifier == "exact" and task.answer else []
    return env.demonstration_turns(task)


def encoded_lengths(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[int]:
    """Token counts of `texts` without special tokens; a fast tokenizer's backend encodes the
    batch in Rust, several times faster than the Python wrapper, with the same ids."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False).input_ids]


def refuse_long_turns(misfits: list[Misfit], total: int, key: str, budget: int, measured: str) -> None:
    if not misfits:
        return
    longest = max(m.tokens for m in misfits)
    raise ConfigError(
        f"{len(misfits)} of {total} tasks teach an assistant turn longer than {key}={budget} tokens "
        f"({measured}; longest {longest} tokens: {longest_first(misfits)}). Sampling cuts every such turn, so RL "
        f"can never produce it: set {key} >= {longest}, or shorten or drop those demonstrations / answers"
    )


def effective_prompt_format(cfg: Config, tokenizer: PreTrainedTokenizerBase | None) -> str:
    """raw or chat, as the env will decide it (`tokenizer` None: the tiny tokenizer, which has a template)."""
    if cfg.env.type != "single_turn" or cfg.rollout.prompt_format == "chat":
        return "chat"
    if cfg.rollout.prompt_format == "raw":
        return "raw"
    return "chat" if tokenizer is None or getattr(tokenizer, "chat_template", None) else "raw"


def check_jsonl_texts(cfg: Config, tokenizer: PreTrainedTokenizerBase | None) -> None:
    """Before a tokenizer is trained or a model loaded, each line of the JSONL task files: a chat
    prompt needs a chat format, and no prompt or taught turn is too long by its length alone.

    `tokenizer` is the model directory's (None: the tiny tokenizer, no token of which covers more
    than MAX_TOKEN_CHARS characters)."""
    if cfg.task.source != "jsonl" or cfg.task.path is None:
        return
    per_token = max_chars_per_token(tokenizer) if tokenizer is not None else MAX_TOKEN_CHARS
    prompt_format = effective_prompt_format(cfg, tokenizer)
    context = model_context(cfg)
    room = None if context is None else context - max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    imitated = cfg.sft.steps > 0
    for path in filter(None, (cfg.task.path, cfg.task.eval_path)):
        turns: list[Misfit] = []
        numbered = read_numbered_tasks(path)
        for lineno, task in numbered:
            where = f"{path}:{lineno}"
            if isinstance(task.prompt, list) and prompt_format == "raw":
                why = "" if cfg.rollout.prompt_format == "raw" else " (auto picks raw: the model's tokenizer has no chat template)"
                raise ConfigError(
                    f"{where}: the prompt is a list of chat messages, but rollout.prompt_format=raw{why} encodes text "
                    "prompts only; set rollout.prompt_format=chat (with a tokenizer that has a chat template) or write the prompt as text"
                )
            text = prompt_text(task)
            if room is not None and (at_least := prompt_lower_bound(text, tokenizer, per_token, room)) > room:
                raise_prompt_too_long(where, len(text), at_least, cfg, context)
            shortest = max((size_lower_bound(t, per_token) + 1 for t in taught_texts(task, imitated)), default=0)
            turns.append(Misfit(where, shortest))
        for key, budget in demonstration_budgets(cfg):
            refuse_long_turns(
                [m for m in turns if m.tokens > budget], len(numbered), key, budget,
                f"at least, from their length: no token covers more than {per_token} characters",
            )


def taught_texts(task: Task, imitated: bool) -> list[str]:
    """Lower-bound texts of the taught turns, without an env (a turn holds at least its content)."""
    if not imitated:
        return [task.answer] if task.verifier == "exact" and task.answer else []
    target = task.sft_target
    return [target] if isinstance(target, str) else [str(m.get("content") or "") for m in target if m.get("role") == "assistant"]


def trained_runs(trained: list[bool]) -> list[int]:
    """Lengths of the runs of trained tokens in an SFT example's mask: one per taught turn."""
    runs, current = [], 0
    for flag in [*trained, False]:
        if flag:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def check_turn_lengths(cfg: Config, env, tasks: Iterable[Task]) -> None:
    """Exact token counts of every taught turn (one batched encode), each closed by one end-of-turn token.

    An env that does not say how it writes a demonstration's turns as text (`demonstration_turns`
    is not part of the Env protocol: a user's own env need not have it) is measured on its own
    `sft_example`: each run of trained tokens is one turn, its end-of-turn token included."""
    imitated = cfg.sft.steps > 0
    measured: list[tuple[Task, int]] = []
    owners: list[Task] = []
    texts: list[str] = []
    for task in tasks:
        if imitated and not hasattr(env, "demonstration_turns"):
            measured += [(task, n) for n in trained_runs(env.sft_example(task)[1])]
            continue
        for text in taught_turns(env, task, imitated):
            owners.append(task)
            texts.append(text)
    if texts:
        measured += [(task, n + 1) for task, n in zip(owners, encoded_lengths(env.tokenizer, texts))]
    if not measured:
        return
    longest: dict[str, Misfit] = {}
    for task, length in measured:
        if task.id not in longest or longest[task.id].tokens < length:
            longest[task.id] = Misfit(f"task {task.id}", length)
    for key, budget in demonstration_budgets(cfg):
        misfits = [m for m in longest.values() if m.tokens > budget]
        refuse_long_turns(misfits, len(longest), key, budget, "with the end-of-turn token, measured with the run's tokenizer")


def check_prompt_sizes(tasks: list[Task], cfg: Config, env, context: int | None) -> None:
    """Exact prompt lengths, after a length-only pass that spares the encoder a huge prompt."""
    if context is None:
        return
    room = context - max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    per_token = max_chars_per_token(env.tokenizer)
    for task in tasks:
        text = prompt_text(task)
        if (at_least := prompt_lower_bound(text, env.tokenizer, per_token, room)) > room:
            raise_prompt_too_long(f"task {task.id}", len(text), at_least, cfg, context)
    try:
        lengths = [len(env.prompt_ids(t)) for t in tasks]
    except PromptFormatError as err:
        raise ConfigError(f"rollout.prompt_format: {err}") from None
    check_prompt_lengths(lengths, max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0), context)


def raise_prompt_too_long(where: str, chars: int, at_least: int, cfg: Config, context: int) -> None:
    budget = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    raise ConfigError(
        f"{where}: the prompt has {chars:,} characters, at least {at_least:,} tokens, but the model's context is "
        f"{context} tokens, {budget} of them kept for the response (rollout.max_new_tokens / eval.max_new_tokens); "
        "shorten or drop that prompt, or use a model with a longer context"
    )


def check_tasks_fit(cfg: Config, tasks: TaskSplits, tokenizer: PreTrainedTokenizerBase | None = None) -> PreTrainedTokenizerBase:
    """Prompts fit the context and taught turns fit the sampling cap; returns the tokenizer used."""
    tokenizer = tokenizer if tokenizer is not None else run_tokenizer(cfg, tasks)
    env = build_env(cfg, tokenizer)
    context = model_context(cfg)
    everything = tasks.train + tasks.eval
    check_prompt_sizes(everything, cfg, env, context)
    check_turn_lengths(cfg, env, everything)
    return tokenizer


def check_prompt_lengths(prompt_lengths: list[int], max_new_tokens: int, context: int | None) -> None:
    """After tokenization, before training: the longest prompt plus the token budget must fit."""
    if context is None or not prompt_lengths:
        return
    longest = max(prompt_lengths)
    if longest + max_new_tokens > context:
        raise ConfigError(
            f"the longest prompt ({longest} tokens) plus rollout.max_new_tokens={max_new_tokens} exceeds the "
            f"model's context of {context} tokens; shorten the prompts, lower the budget or raise model.max_positions"
        )
