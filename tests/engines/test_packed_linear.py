"""Decode steps over MKL-packed weights (reinforge.engines.packed_linear): same numbers as F.linear
to float rounding, packs remade when the row count changes, and the fused decoder's samples and
behaviour log-probs unchanged by packing beyond float rounding."""

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from float_bounds import logit_bound
from reinforge.engines import packed_linear
from reinforge.engines.base import SamplingParams
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.packed_linear import PackedLinears
from reinforge.engines.torch_engine import TorchEngine

pytestmark = pytest.mark.skipif(
    not packed_linear.available(torch.device("cpu"), torch.float32), reason="this torch has no MKL packed sgemm"
)


def test_packed_linear_matches_linear_and_repacks_per_row_count():
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 40, generator=gen), torch.randn(48, generator=gen)
    other = torch.randn(24, 40, generator=gen)
    packed = PackedLinears()
    for rows in (5, 5, 3):
        x = torch.randn(rows, 40, generator=gen)
        torch.testing.assert_close(packed.linear(x, weight, bias), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed.linear(x, other), F.linear(x, other), rtol=1e-5, atol=1e-5)
        assert packed.rows == rows and len(packed.packs) == 2  # one pack per weight, for this row count only
        assert all(p.is_mkldnn for p in packed.packs.values())  # the packed path, not linear's fallback


def test_decoder_packs_its_decode_weights_and_samples_as_unpacked():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attention_bias=True, mlp_bias=True,
    )
    model = LlamaForCausalLM(config).eval()  # biases on every projection: the packed path adds them too
    prompts = [[1, 5, 9, 3], [2, 7], [4, 4, 8, 1, 6], [3]]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    results = {}
    for pack in (False, True):
        engine = TorchEngine(model, pad_token_id=0)
        engine._decoder = FusedLlamaDecoder(model, torch.float32, pack_weights=pack)
        results[pack] = engine.generate(prompts, params, seed=3)
        decoder = engine._decoder
        if pack:  # every decode matmul went through a pack for the batch's 4 rows: 4 per layer + the LM head
            assert decoder.packed.rows == len(prompts)
            assert len(decoder.packed.packs) == 4 * len(decoder.layers) + 1
        else:
            assert decoder.packed is None
    again = TorchEngine(model, pad_token_id=0).generate(prompts, params, seed=3)
    assert [g.token_ids for g in again] == [g.token_ids for g in results[True]]  # a seed's samples are reproducible
    assert [g.logprobs for g in again] == [g.logprobs for g in results[True]]
    with torch.no_grad():
        bound = logit_bound(model, [p + g.token_ids for p, g in zip(prompts, results[True])])
    for plain, packed in zip(results[False], results[True]):
        assert plain.token_ids == packed.token_ids
        torch.testing.assert_close(torch.tensor(packed.logprobs), torch.tensor(plain.logprobs), rtol=0, atol=bound)
