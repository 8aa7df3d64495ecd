"""Pre-packed linears (runtime/packed_linear.py): same results as F.linear, and never a stale or gradient-less one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lilicorr.runtime import packed_linear
from lilicorr.runtime.packed_linear import kernels_agree, pack_linears

needs_kernels = pytest.mark.skipif(not kernels_agree(torch.float32), reason="this torch has no packed oneDNN linear")


class Quantized(nn.Linear):
    """A subclass with its own forward, as the checkpoint's int8 layers are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0


def small_model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 40), nn.SiLU(), nn.Linear(40, 8, bias=False), Quantized(8, 8)).to(dtype)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_model_matches_f_linear_at_every_row_count(dtype):
    model = small_model(dtype)
    x = torch.randn(3, 7, 24).to(dtype)  # [batch, tokens, in]: a verify-shaped input
    with torch.no_grad():
        ref = model(x)
        keys = list(model.state_dict())
        assert pack_linears(model) == 2  # the subclass keeps its own forward
        got = model(x)
        first = [model[0](x[0, :rows]) for rows in (1, 2, 7)]  # 1, 2 and 7 rows: each row as in the whole
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert got.shape == ref.shape and torch.allclose(got.float(), ref.float(), rtol=tol, atol=tol)
    for rows, y in zip((1, 2, 7), first, strict=True):
        want = x[0, :rows].float() @ model[0].weight.float().T + model[0].bias.float()
        assert torch.allclose(y.float(), want, rtol=tol, atol=tol)
    assert list(model.state_dict()) == keys  # the packed copy is not state: checkpoints are unchanged
    assert isinstance(model[0], nn.Linear) and model[0]._packed_weight is not None


@needs_kernels
def test_an_in_place_update_is_seen_not_the_stale_packed_copy():
    model = small_model(torch.float32)
    pack_linears(model)
    x = torch.randn(4, 24)
    with torch.no_grad():
        model[0].weight.mul_(2.0)  # an optimizer step or a load_state_dict: the version counter moves
        got = model[0](x)
    assert torch.allclose(got, x @ model[0].weight.T + model[0].bias, atol=1e-5)


@needs_kernels
def test_a_replaced_weight_is_seen_not_the_stale_packed_copy():
    model = small_model(torch.float32)
    pack_linears(model)
    new = torch.randn(40, 24)
    while new._version < model[0].weight._version:  # the same version counter as the old one: only storage differs
        new.add_(0.0)
    model[0].weight = nn.Parameter(new, requires_grad=False)
    x = torch.randn(4, 24)
    with torch.no_grad():
        assert torch.allclose(model[0](x), x @ model[0].weight.T + model[0].bias, atol=1e-5)


@needs_kernels
def test_training_gets_gradients_through_a_packed_layer():
    model = small_model(torch.float32)
    pack_linears(model)
    x = torch.randn(5, 24, requires_grad=True)
    model[:3](x).sum().backward()
    assert model[0].weight.grad is not None and x.grad is not None and float(x.grad.abs().sum()) > 0


def test_switched_off_or_without_kernels_nothing_is_packed(monkeypatch):
    monkeypatch.setenv(packed_linear.ENV, "0")
    model = small_model(torch.float32)
    assert pack_linears(model) == 0 and "forward" not in vars(model[0])
    monkeypatch.delenv(packed_linear.ENV)
    monkeypatch.setattr(packed_linear, "_PROBE", {})
    monkeypatch.setattr(packed_linear, "_kernels", lambda: False)
    assert pack_linears(model) == 0 and "forward" not in vars(model[0])


def test_a_probe_that_disagrees_leaves_the_layers_alone(monkeypatch):
    monkeypatch.setattr(packed_linear, "_PROBE", {})
    monkeypatch.setattr(packed_linear, "_kernels", lambda: True)
    monkeypatch.setattr(packed_linear, "pack_weight", lambda w: w.detach())
    monkeypatch.setattr(packed_linear, "packed_matmul", lambda x, p, b, out: torch.zeros(*x.shape[:-1], out))
    model = small_model(torch.float32)
    assert pack_linears(model) == 0
    x = torch.randn(2, 24)
    assert torch.allclose(model[0](x), x @ model[0].weight.T + model[0].bias, atol=1e-6)
