"""The single-node LoRA projection equals peft's LoRA Linear, values and gradients, and leaves to
peft's forward every case it does not compute."""

from __future__ import annotations

import pytest
import torch

from reinforge.learner import lora_projection
from reinforge.learner.lora_projection import project, vanilla_lora
from reinforge.models.lora import peft_available

pytestmark = pytest.mark.skipif(not peft_available(), reason="needs peft (reinforge[lora])")


def lora_linear(bias: bool, dropout: float = 0.0, seed: int = 0):
    import peft

    torch.manual_seed(seed)
    net = torch.nn.Sequential()
    net.add_module("proj", torch.nn.Linear(6, 5, bias=bias))
    model = peft.get_peft_model(net, peft.LoraConfig(r=3, lora_alpha=6, target_modules=["proj"], lora_dropout=dropout))
    module = model.base_model.model.proj
    with torch.no_grad():
        module.lora_B["default"].weight.normal_()  # peft starts B at zero: make the adapter matter
    return model, module


def test_hand_computed_example():
    """in = 2, out = 1, r = 1, s = 2: y = x.w + b + 2 (x.a) b_lora."""
    _, module = lora_linear(bias=True)
    small = torch.nn.Linear(2, 1)
    module.base_layer, module.lora_A["default"], module.lora_B["default"] = small, torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    module.scaling["default"] = 2.0
    with torch.no_grad():
        small.weight.copy_(torch.tensor([[1.0, 2.0]]))
        small.bias.fill_(0.5)
        module.lora_A["default"].weight.copy_(torch.tensor([[3.0, -1.0]]))
        module.lora_B["default"].weight.fill_(0.25)
    x = torch.tensor([[1.0, 1.0]], requires_grad=True)
    y = project(module, x)
    # x.w + b = 3.5; x.a = 2; 2 * 2 * 0.25 = 1
    assert y.item() == pytest.approx(4.5)
    y.sum().backward()
    # dy/dx = w + s * b_lora * a = [1, 2] + 0.5 * [3, -1] = [2.5, 1.5]
    assert x.grad.tolist() == [[pytest.approx(2.5), pytest.approx(1.5)]]
    # dy/dA = s * b_lora * x = 0.5 * [1, 1]; dy/dB = s * x.a = 4
    assert module.lora_A["default"].weight.grad.tolist() == [[pytest.approx(0.5), pytest.approx(0.5)]]
    assert module.lora_B["default"].weight.grad.item() == pytest.approx(4.0)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_values_and_gradients_equal_peft(bias: bool, seed: int):
    _, module = lora_linear(bias, seed=seed)
    module.base_layer.weight.requires_grad_(True)  # a trained base too: every gradient the node returns
    if bias:
        module.base_layer.bias.requires_grad_(True)
    params = [p for p in module.parameters() if p.requires_grad]
    x = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(seed))
    upstream = torch.randn(2, 7, 5, generator=torch.Generator().manual_seed(seed + 10))

    def grads(forward):
        xx = x.clone().requires_grad_(True)
        out = forward(xx)
        return [out, *torch.autograd.grad((out * upstream).sum(), [xx, *params])]

    ours, peft_own = grads(lambda xx: project(module, xx)), grads(module)
    assert vanilla_lora(module) is not None
    for a, b in zip(ours, peft_own):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_the_node_saves_only_its_input_and_parameters():
    _, module = lora_linear(bias=False)
    x = torch.randn(16, 6, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        project(module, x)
    assert {t.data_ptr() for t in saved} <= {x.data_ptr(), *(p.data_ptr() for p in module.parameters())}


def test_what_it_does_not_compute_takes_peft_forward(monkeypatch):
    calls = []
    monkeypatch.setattr(lora_projection._LoraLinear, "apply", lambda *a: calls.append(1) or pytest.fail("the node ran"))
    x = torch.randn(4, 6)
    model, module = lora_linear(bias=False)
    with model.disable_adapter():
        assert torch.equal(project(module, x), module.base_layer(x))  # the base alone
    _, dropping = lora_linear(bias=False, dropout=0.5)
    dropping.train()
    project(dropping, x)  # dropout in training: peft's forward draws the mask
    with torch.autocast("cpu", dtype=torch.bfloat16):
        project(module, x)
    plain = torch.nn.Linear(6, 5)
    assert torch.equal(project(plain, x), plain(x))
    assert not calls
