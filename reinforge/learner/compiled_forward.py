"""Opt-in `torch.compile` of the learner's forward (and the reference's): `algo.compile_forward`.

Why: in eager PyTorch on a CPU, the update of a small model is bound by the elementwise work
around its matmuls, not by the matmuls. For the `micro` preset the matmul shapes of the update
run at ~90% of the fp32 matmul peak on their own, yet the whole forward + backward reaches ~40%:
RMSNorm, rotary, SiLU x up, residual adds and the log-softmax each read and write the activations
again, in forward and in backward. Inductor fuses those passes into a few loops (one C++ kernel per
fusion, compiled with the machine's C++ compiler), which made forward + backward 1.7x faster here
(benchmarks/vs_trl.py --compile; docs/benchmarks.md).

What it costs: a compile per process (with an empty inductor cache, 70 s on an idle 2-core box and
seven minutes at load 10; 14-43 s where the cache under /tmp already holds the kernels), and
recompiles for shapes it has not seen (`dynamic=True` keeps sequence length and batch size symbolic, so a new
width costs seconds, not a compile). Log-probs move by float rounding (fused loops sum in another
order): <= 1e-6 from the eager forward on the micro preset, and the test bounds it at 1e-5. Off by
default: the suite's tiny runs would never earn the compile back, and a result must not depend on
whether a C++ compiler is installed.

`nn.Module.compile` compiles the module in place: parameter names, `state_dict`, checkpoints and
the engine (which reads the weights, never the forward) stay as they are.
"""

from __future__ import annotations

import torch


def compile_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Compile `model`'s forward in place (dynamic shapes); return it."""
    model.compile(dynamic=True)
    return model
