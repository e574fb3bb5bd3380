"""The sharded learner (workers.sharding=fsdp) with the packed forward and the chunked log-softmax:
2 FSDP2 gloo ranks on CPU take the step one process takes, tied and untied output layers, and the
update never holds a [tokens, vocabulary] tensor (reinforge.distributed.sharded_forward)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from reinforge.distributed.ddp import free_port, init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.learner import packed_forward
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from deadlines import PROCESS_START_S
from teacher_forcing import assert_replays
from test_ddp import LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer
from test_sharded_learner import sharded_step

CHUNK = 4  # tokens per chunk of the log-softmax: several chunks per micro-batch of the tiny batch
AGG = "token_mean"
TIES = ("tied", "untied")

# The memory check: a tiny model with a large vocabulary, micro-batches of ROWS x WIDTH tokens.
BIG_VOCAB, ROWS, WIDTH, MEMORY_CHUNK = 4096, 4, 80, 16


def nano(tie: str, seed: int = 0) -> LlamaForCausalLM:
    """The nano preset on the test tokenizer, its output layer tied to the embedding or its own."""
    config = build_tiny_llama(make_tokenizer(), "nano").config
    return seeded_llama(changed(config, tie_word_embeddings=tie == "tied"), seed)


def changed(config: LlamaConfig, **changes) -> LlamaConfig:
    config = LlamaConfig.from_dict(config.to_dict())
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def seeded_llama(config: LlamaConfig, seed: int = 0) -> LlamaForCausalLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def is_tied(model: torch.nn.Module) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


class LargestTensor(TorchDispatchMode):
    """The most elements of any floating tensor an op returns while the mode is on (every
    allocation of an update is some op's output: activations, logits, gathers, gradients)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return out


def big_vocab_batch(rank: int) -> TrainingBatch:
    """ROWS full rows of WIDTH random tokens (no pads, no shared prefix: every token is computed)."""
    g = torch.Generator().manual_seed(1 + rank)
    ids = torch.randint(0, BIG_VOCAB, (ROWS, WIDTH), generator=g)
    mask = torch.ones_like(ids)
    loss_mask = torch.zeros(ROWS, WIDTH - 1, dtype=torch.bool)
    loss_mask[:, WIDTH // 2 :] = 1
    return TrainingBatch(ids, mask, loss_mask, -torch.rand(ROWS, WIDTH - 1, generator=g) * 4, torch.randn(ROWS, generator=g))


def big_vocab_model() -> LlamaForCausalLM:
    config = build_tiny_llama(make_tokenizer(), "nano").config
    return seeded_llama(changed(config, vocab_size=BIG_VOCAB, max_position_embeddings=WIDTH))


def largest_tensor_of_an_update(chunk_tokens: int | None, rank: int) -> int:
    learner = ShardedPolicyLearner(
        big_vocab_model(), LR, micro_batch_size=ROWS, max_response_tokens=WIDTH, logprob_chunk_tokens=chunk_tokens,
    )
    with LargestTensor() as mode:
        learner.train_step(big_vocab_batch(rank), make_policy_objective(algo_for(AGG)))
    return mode.largest


def rank_work(rank: int, world_size: int) -> dict:
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    shard = batch.select(shard_rows(len(batch), rank, world_size))
    packed = []
    real_packed_hidden = packed_forward.packed_hidden
    packed_forward.packed_hidden = lambda *a, **k: packed.append(1) or real_packed_hidden(*a, **k)  # this process only
    out = {}
    for tie in TIES:
        learner = ShardedPolicyLearner(nano(tie), LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE, logprob_chunk_tokens=CHUNK)
        assert learner.pack and learner.logprob_chunk_tokens == CHUNK
        steps = [sharded_step(learner, batch, make_policy_objective(algo_for(AGG)), shard) for _ in range(2)]
        out[tie] = [replace(step, loss_fn=None) for step in steps]
        out[tie + "/still_tied"] = is_tied(learner.model)
    out["packed_forwards"] = len(packed)
    packed_forward.packed_hidden = real_packed_hidden
    out["largest/chunked"] = largest_tensor_of_an_update(MEMORY_CHUNK, rank)
    out["largest/whole_logits"] = largest_tensor_of_an_update(None, rank)
    return out


def rank_main(rank: int, world_size: int, port: int, folder: str) -> None:
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        torch.save(rank_work(rank, world_size), f"{folder}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Both ranks' records, each rank in a spawned process (a process that ran FSDP2 as rank 0
    keeps a gloo socket listening, which the Ray loopback test would see in pytest's)."""
    folder = tmp_path_factory.mktemp("sharded_forward")
    context = mp.spawn(rank_main, args=(2, free_port(), str(folder)), nprocs=2, join=False)
    deadline = time.monotonic() + PROCESS_START_S
    try:  # join returns False each time one rank ends while another still runs
        while not context.join(timeout=max(deadline - time.monotonic(), 0)):
            assert time.monotonic() < deadline, "the ranks did not finish"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("tie", TIES)
def test_packed_chunked_fsdp_steps_match_one_process(ranks, tie) -> None:
    """Every step of 2 sharded ranks that pack their tokens and chunk their log-softmax is the step
    one process takes on the whole batch with the same settings (tests/teacher_forcing.py bounds);
    a tied output layer stays the embedding's weight."""
    out = ranks[0]
    assert all(r["packed_forwards"] > 0 for r in ranks), "the ranks ran the packed forward"
    steps = [replace(step, loss_fn=make_policy_objective(algo_for(AGG))) for step in out[tie]]
    initial = nano(tie).state_dict()
    assert all(torch.equal(steps[0].before.model[k], initial[k]) for k in initial)
    reference = PolicyLearner(nano(tie), LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE, logprob_chunk_tokens=CHUNK)
    assert is_tied(reference.model) == (tie == "tied")
    assert_replays(reference, steps, algo_for(AGG))
    moved = max((steps[-1].outcome.weights[k] - initial[k]).abs().max().item() for k in steps[-1].outcome.weights)
    assert moved > LR / 2
    assert all(r[tie + "/still_tied"] == (tie == "tied") for r in ranks)


def test_sharded_update_never_holds_tokens_by_vocabulary_logits(ranks) -> None:
    """The largest tensor of a sharded update with chunks of C tokens: a [C, V] chunk of logits,
    or one of the root's full weights or gradients (the tied [V, H] embedding, gathered for the
    forward; its gradient before the reduce-scatter). Never the [N, V] logits of the micro-batch's
    N = ROWS x WIDTH tokens, which the update without chunks does hold (the control)."""
    model = big_vocab_model()
    hidden = model.config.hidden_size
    # The root's all-gather and reduce-scatter buffers hold its parameters (embedding, final norm) flat.
    root = BIG_VOCAB * hidden + hidden
    bound = max(MEMORY_CHUNK * BIG_VOCAB, root)
    tokens = ROWS * (WIDTH - 1)  # the positions that predict a token
    assert tokens * BIG_VOCAB > 3 * bound, "the sizes must tell the two apart"
    for out in ranks:
        assert out["largest/whole_logits"] >= tokens * BIG_VOCAB  # the control: the measure sees the logits
        assert out["largest/chunked"] <= bound, (out["largest/chunked"], bound)
