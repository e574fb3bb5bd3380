"""C kernels for a small model's RL step on a CPU, compiled on first use for the machine's CPU
(build.py): where eager PyTorch pays per-op fixed costs and re-reads activations between ops.

  decode_attention   a decode step's attention over the KV cache (the engine)
  packed_attention   causal attention of packed tokens, forward and backward (the learner)
  decode_gemm        a decode step's matmuls on weights laid out in panels (the engine, large models)
  layers             RMSNorm, rotary embedding and SwiGLU, forward and backward (both)
  choice             engine.decode_kernels / algo.packed_kernels: auto | torch | native
"""
