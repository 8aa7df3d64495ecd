"""vLLM's own DFlash2 grouped dynamic convolution (``DFlashGroupedConv``, which ``LiLiCorr`` puts in every
draft layer when ``conv_kernel_size`` is set) loads our convolution tensors and computes what ours does.

Why this test: the shipped ``smollm2-lilicorr-conv`` claims to load unchanged in vLLM, but vLLM-CPU cannot
serve a LiLiCorr drafter (its head runs only with the GPU model runner), so the serving test does not reach
it. The convolution is the only part of that checkpoint the other compat tests do not cover (backbone:
the DFlash serving test; head: ``test_vllm_head.py``): here its parameter names and shapes, and both sides
of the convolution on vLLM's CPU path, are compared with ours — on random weights and on the shipped ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lilicorr.checkpoint import load_draft
from lilicorr.models.conv import GroupedDynamicConv

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models/smollm2-lilicorr-conv"


def _vllm_conv(hidden: int, taps: int, group: int, block: int, weights: dict[str, torch.Tensor]):
    """vLLM's module with ``weights`` (``base_kernel``, ``kernel_projection.weight``) loaded by its own loader."""
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.models.qwen3_dflash2 import DFlashGroupedConv
    from vllm.model_executor.models.utils import AutoWeightsLoader

    conv = DFlashGroupedConv(
        hidden_size=hidden, taps=taps, group_size=group, block_size=block, params_dtype=torch.float32, prefix="conv"
    )
    shapes = {k: tuple(p.shape) for k, p in conv.named_parameters()}
    loaded = AutoWeightsLoader(conv).load_weights(weights.items())
    for mod in conv.modules():
        if isinstance(mod, LinearBase):
            mod.quant_method.process_weights_after_loading(mod)
    return conv, shapes, set(loaded)


def _compare(ours: GroupedDynamicConv, vconv, block: int, requests: int, seed: int) -> None:
    """Both sides of the convolution on ``requests`` draft blocks: vLLM sees them flattened, one block of
    query tokens per request, as its model runner lays them out."""
    g = torch.Generator().manual_seed(seed)
    hidden = ours.base_kernel.shape[-1]
    u = torch.randn(requests, block, hidden, generator=g)  # sublayer input  [requests, block, hidden]
    y = torch.randn(requests, block, hidden, generator=g)  # sublayer output [requests, block, hidden]
    with torch.no_grad():
        v_in, coefficients = vconv.prepare(u.reshape(-1, hidden))
        v_out = vconv.finish(y.reshape(-1, hidden), coefficients)
        # ours on one block per row (the engine's layout) and on all blocks along one row (training's layout,
        # where the convolution must restart at every block)
        for rows in (block, requests * block):
            u_, y_ = u.reshape(-1, rows, hidden), y.reshape(-1, rows, hidden)  # [requests * block / rows, rows, hidden]
            k = ours.coefficients(u_)  # [.., rows, 2, taps, hidden]
            torch.testing.assert_close(v_in.view_as(u_), ours.apply(u_, k, 0, block), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(v_out.view_as(y_), ours.apply(y_, k, 1, block), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("hidden", "taps", "group", "block"), [(32, 2, 16, 8), (48, 3, 8, 4), (64, 4, 16, 16)])
def test_random_convolution_matches_vllm(vllm_env, hidden, taps, group, block):
    from vllm.config import set_current_vllm_config

    torch.manual_seed(hidden + taps)
    ours = GroupedDynamicConv(hidden, taps, group)
    with torch.no_grad():  # away from the identity initialisation, or both sides would be trivially equal
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    weights = {k: v.clone() for k, v in ours.state_dict().items()}
    with set_current_vllm_config(vllm_env):
        vconv, shapes, loaded = _vllm_conv(hidden, taps, group, block, weights)
    assert shapes == {k: tuple(v.shape) for k, v in weights.items()}
    assert loaded == set(weights)
    _compare(ours, vconv, block, requests=3, seed=block)


def test_shipped_conv_drafter_loads_in_vllm_conv(vllm_env):
    """Every convolution of the shipped drafter: vLLM's parameter set equals the checkpoint's, and the
    trained kernels compute the same in vLLM as in our backbone."""
    from vllm.config import set_current_vllm_config

    if not (SHIPPED / "model.safetensors").exists():
        pytest.skip(f"{SHIPPED} is not in this checkout")
    model = load_draft(SHIPPED, dtype=torch.float32)
    cfg = model.cfg
    assert cfg.conv_kernel_size and cfg.conv_group_size, "the shipped conv drafter has no convolution in its config"
    tensors = load_file(SHIPPED / "model.safetensors")
    convs = {n: m for n, m in model.named_modules() if isinstance(m, GroupedDynamicConv)}
    assert len(convs) == 2 * cfg.num_hidden_layers  # attention_conv and mlp_conv in every layer
    for name, ours in convs.items():
        weights = {k.removeprefix(name + "."): v.float() for k, v in tensors.items() if k.startswith(name + ".")}
        with set_current_vllm_config(vllm_env):
            vconv, shapes, loaded = _vllm_conv(
                cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size, cfg.block_size, weights
            )
        assert shapes == {k: tuple(v.shape) for k, v in weights.items()}, name
        assert loaded == set(weights), name
        _compare(ours, vconv, cfg.block_size, requests=2, seed=len(name))
