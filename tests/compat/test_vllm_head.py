"""vLLM's own ``LiLiCorrHead`` loaded from a checkpoint folder written by lilicorr scores our lattices
exactly as our head does (fp32 within 1e-5, bf16 within 2e-2), and its parameter set equals ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lilicorr.checkpoint import load_draft, save_draft
from lilicorr.models.config import DraftConfig, LiLiCorrGeometry
from lilicorr.models.draft import DraftModel
from lilicorr.models.head import candidates

ROOT = Path(__file__).resolve().parents[2]
# every shipped drafter with a LiLiCorr head, both targets (Gemma's is sharded: 262 144-token embedding rows)
SHIPPED = ["smollm2-lilicorr", "smollm2-lilicorr-conv", "gemma3-270m-lilicorr"]

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
    weights = [(k.removeprefix("lilicorr."), v) for k, v in _head_tensors(ckpt).items()]
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


def _head_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """The ``lilicorr.*`` tensors of a drafter folder, one file or shards (``model.safetensors.index.json``)."""
    files = [folder / "model.safetensors"]
    if not files[0].exists():
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        files = [folder / f for f in sorted(set(index["weight_map"].values()))]
    return {k: v for f in files for k, v in load_file(f).items() if k.startswith("lilicorr.")}


def _lattice(cfg, b, n, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = min(cfg.vocab_size, 1024)  # the head sees candidates' embeddings, not the table: a slice will do
    logits = torch.randn(b, n, vocab, generator=g) * 4
    ids, lp = candidates(logits, cfg.lilicorr.candidate_topk)
    emb = torch.randn(vocab, cfg.hidden_size, generator=g)
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
    _compare_heads(vhead, loaded, vllm_shapes, ours, ckpt, cfg, dtype, tol)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_heads_score_as_vllm(vllm_env, name):
    """Each shipped drafter's trained head — SmolLM2's and Gemma 3's, whose serving stack vLLM cannot start yet
    (``test_vllm_serving.py``) — loads in vLLM's ``LiLiCorrHead`` with exactly its parameters and scores random
    lattices as ours does (fp32, within 1e-5)."""
    from vllm.config import set_current_vllm_config

    folder = ROOT / "models" / name
    if not (folder / "config.json").exists():
        pytest.skip(f"{folder} is not in this checkout")
    with set_current_vllm_config(vllm_env):
        vhead, loaded, vllm_shapes = _vllm_head(folder, torch.float32)
    model = load_draft(folder, dtype=torch.float32)
    _compare_heads(vhead, loaded, vllm_shapes, model.lilicorr, folder, model.cfg, torch.float32, 1e-5)


def _compare_heads(vhead, loaded, vllm_shapes, ours, ckpt, cfg, dtype, tol):
    # Parameter names and shapes: vLLM's set equals the checkpoint's lilicorr.* set.
    ckpt_shapes = {k.removeprefix("lilicorr."): tuple(v.shape) for k, v in _head_tensors(ckpt).items()}
    assert vllm_shapes == ckpt_shapes
    assert set(loaded) == set(ckpt_shapes)
    block = cfg.block_size
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
