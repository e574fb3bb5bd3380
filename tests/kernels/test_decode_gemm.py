"""The decode step's panel GEMM (reinforge.kernels.decode_gemm): its products against float64
within the bound of a sequential dot product, its layout's round trips, and which decoders take it."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from float_bounds import EPS32
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.kernels import decode_gemm

needs_kernel = pytest.mark.skipif(not decode_gemm.available(), reason="the panel GEMM needs a C compiler and an AVX-512 CPU")


def dot_product_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per output: a dot product of K terms summed in order errs by at most K * u * sum |x_k w_k|
    (Higham 2002, section 3.1), u = EPS32 / 2; one more rounding for the bias."""
    k = x.shape[1]
    return (k + 1) * EPS32 / 2 * (x.abs().double() @ weight.abs().double().t()) + 1e-30


@needs_kernel
@pytest.mark.parametrize("rows", [1, 5, 8, 13, 32])
@pytest.mark.parametrize("out_features, in_features", [(960, 576), (100, 70), (49, 16)])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_panel_linear_is_a_dot_product_within_its_float_bound(rows, out_features, in_features, with_bias) -> None:
    g = torch.Generator().manual_seed(rows * 1000 + out_features)
    weight = torch.randn(out_features, in_features, generator=g)
    bias = torch.randn(out_features, generator=g) if with_bias else None
    x = torch.randn(rows, in_features, generator=g)
    y = decode_gemm.linear(x, decode_gemm.PanelMatrix(weight), bias)
    exact = x.double() @ weight.double().t() + (0 if bias is None else bias.double())
    assert y.shape == (rows, out_features) and y.dtype == torch.float32
    error = (y.double() - exact).abs()
    assert (error <= dot_product_bound(x, weight) + (0 if bias is None else EPS32 * bias.abs().double())).all(), error.max()
    # a wrong panel, row or column moves outputs by O(1): far above the bound
    assert torch.allclose(y, F.linear(x, weight, bias), atol=1e-4)


@needs_kernel
def test_panel_linear_reads_strided_rows() -> None:
    weight = torch.randn(96, 40)
    wide = torch.randn(7, 64)
    x = wide[:, 10:50]  # rows 64 floats apart
    assert torch.allclose(decode_gemm.linear(x, decode_gemm.PanelMatrix(weight)), x @ weight.t(), atol=1e-5)
    transposed = torch.randn(40, 7).t()  # a unit row stride: copied first
    assert torch.allclose(decode_gemm.linear(transposed, decode_gemm.PanelMatrix(weight)), transposed @ weight.t(), atol=1e-5)


def test_panel_matrix_gives_back_its_weight_and_rows() -> None:
    weight = torch.randn(100, 24)  # 100 = two full panels of 48 and 4 columns of a third
    matrix = decode_gemm.PanelMatrix(weight)
    assert matrix.panels.shape == (3, 24, decode_gemm.PANEL)
    assert torch.equal(matrix.weight(), weight)
    index = torch.tensor([0, 47, 48, 99, 5])
    assert torch.equal(matrix.rows(index), weight[index])
    kept = weight.clone()
    weight.add_(1.0)  # an optimizer step on the model's weight: the panels are a copy
    assert torch.equal(matrix.weight(), kept)
    column = torch.randn(5, 1)  # one input feature: a layout the transpose alone would not copy
    panels = decode_gemm.PanelMatrix(column)
    column.zero_()
    assert panels.weight().abs().sum() > 0


@needs_kernel
def test_chained_matrices_give_the_same_products() -> None:
    """Prefetching the next matrix's first panel (chain) reads memory only: outputs are unchanged."""
    g = torch.Generator().manual_seed(1)
    matrices = [decode_gemm.PanelMatrix(torch.randn(out, 32, generator=g)) for out in (96, 50, 200)]
    x = torch.randn(9, 32, generator=g)
    alone = [decode_gemm.linear(x, m) for m in matrices]
    decode_gemm.chain(matrices)
    assert [m.then for m in matrices] == matrices[1:] + matrices[:1]
    assert all(torch.equal(decode_gemm.linear(x, m), y) for m, y in zip(matrices, alone))


def test_a_dropped_chain_is_freed_at_once_without_the_garbage_collector() -> None:
    """A chain is a cycle: held strongly, a released decoder's panels would wait for the cyclic
    collector and stay resident through the update that follows the rollout."""
    matrices = [decode_gemm.PanelMatrix(torch.randn(out, 32)) for out in (96, 50)]
    decode_gemm.chain(matrices)
    alive = [weakref.ref(m) for m in matrices]
    gc.disable()
    try:
        del matrices
        assert [ref() for ref in alive] == [None, None]
    finally:
        gc.enable()


def test_panel_matrix_refuses_what_the_kernel_cannot_read() -> None:
    with pytest.raises(ValueError, match="float32 CPU"):
        decode_gemm.PanelMatrix(torch.randn(4, 4, dtype=torch.float64))


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, tie_word_embeddings=True, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


@needs_kernel
def test_only_a_model_that_streams_its_weights_takes_the_panels(monkeypatch) -> None:
    """A small model (the default recipe's) keeps torch's GEMM and its rounding; from
    MIN_STREAMED_BYTES on, the C decode path multiplies panels; torch's ops never do."""
    model = tiny_llama()
    assert not FusedLlamaDecoder(model, decode_kernels="native").panel_gemm
    monkeypatch.setattr(decode_gemm, "MIN_STREAMED_BYTES", 0)
    decoder = FusedLlamaDecoder(model, decode_kernels="native")
    assert decoder.panel_gemm and isinstance(decoder.lm_head, decode_gemm.PanelMatrix)
    assert not FusedLlamaDecoder(model, decode_kernels="torch").panel_gemm
    # same logits as torch's GEMM to float rounding, tied embedding read from the LM head's panels
    ids = torch.tensor([[0, 5, 17, 33, 250], [9, 8, 7, 6, 5]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.inference_mode():
        panels, _ = decoder.prefill(ids, mask, 4)
        monkeypatch.setattr(decode_gemm, "MIN_STREAMED_BYTES", 1 << 62)
        plain, _ = FusedLlamaDecoder(model, decode_kernels="native").prefill(ids, mask, 4)
    assert torch.allclose(panels, plain, atol=1e-5) and not torch.equal(panels, torch.zeros_like(panels))
