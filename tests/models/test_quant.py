"""Quantized draft exports (NVFP4 ModelOpt layout, int8 W8A8 compressed-tensors) and their loader."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from lilicorr.checkpoint import CheckpointError, load_draft, save_draft
from lilicorr.checkpoint.quant import (
    E2M1_VALUES,
    Int8Linear,
    dequantize_nvfp4,
    float_modules,
    must_stay_float,
    quantize_int8,
    quantize_nvfp4,
)
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.export.quantized import export_quantized
from tests.decoding.engine_helpers import random_draft


def test_nvfp4_layout_and_round_trip():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 64, generator=g)
    packed, scale, gscale = quantize_nvfp4(w)
    assert packed.dtype == torch.uint8 and packed.shape == (8, 32)
    assert scale.dtype == torch.float8_e4m3fn and scale.shape == (8, 4) and gscale.shape == ()
    back = dequantize_nvfp4(packed, scale, gscale)
    rel = (back - w).norm() / w.norm()
    assert rel < 0.12  # 4-bit floats: ~8 % relative error on Gaussian weights
    # values already on the e2m1 grid of one block survive exactly; low nibble = even element
    grid = torch.cat([E2M1_VALUES, -E2M1_VALUES.flip(0)]).repeat(1, 1)[:, :16]
    p2, s2, g2 = quantize_nvfp4(grid * 3.0)
    torch.testing.assert_close(dequantize_nvfp4(p2, s2, g2), grid * 3.0, rtol=0, atol=1e-6)
    code0, code1 = int(p2[0, 0]) & 0x0F, int(p2[0, 0]) >> 4
    assert (code0, code1) == (0, 1)  # 0.0 then 0.5 (×scale)


def test_nvfp4_matches_vllm_unpacking_convention():
    """vLLM's break_fp4_bytes: stack(low, high) per byte; sign bit 0x8; magnitudes from the e2m1 table."""
    packed = torch.tensor([[0x9A, 0x17]], dtype=torch.uint8)  # bytes: (low 0xA, high 0x9), (low 0x7, high 0x1)
    vals = dequantize_nvfp4(packed.repeat(1, 8), torch.ones(1, 1).to(torch.float8_e4m3fn), torch.tensor(1.0))
    assert vals[0, :4].tolist() == [-1.0, -0.5, 6.0, 0.5]


def test_int8_linear_is_close_to_the_float_layer():
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(64, 48)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(48, 64, generator=g) * 0.1)
    q, s = quantize_int8(lin.weight)
    layer = Int8Linear(q, s, lin.bias.detach(), torch.float32)
    for rows in (1, 7, 40):
        x = torch.randn(rows, 64, generator=g)
        ref = lin(x)
        assert ((layer(x) - ref).norm() / ref.norm()) < 0.02


def test_float_only_modules_are_never_targets(tiny_target):
    model = random_draft(tiny_target, lilicorr=True)
    excluded = float_modules(model)
    for name in (
        "lilicorr.out_head",
        "lilicorr.in_head",
        "lilicorr.factor_input_proj",
        "lilicorr.layers.0.attn.in_proj",
    ):
        assert name in excluded and must_stay_float(name)
    assert "lilicorr.feature_mlp.up_proj" in excluded and "lm_head" in excluded
    assert not must_stay_float("lilicorr.layers.0.attn.out_proj") and not must_stay_float("fc")


@pytest.mark.parametrize("scheme", ["nvfp4", "int8"])
def test_export_load_and_lossless_decoding(tiny_target, tmp_path, scheme):
    model = random_draft(tiny_target, lilicorr=True)
    src = tmp_path / "bf16"
    save_draft(model, src)
    summary = export_quantized(load_draft(src), tmp_path / scheme, scheme)
    assert "fc" in summary["quantized"] and "lilicorr.out_head" in summary["excluded"]
    cfg = json.loads((tmp_path / scheme / "config.json").read_text())
    qc = cfg["quantization_config"]
    listed = qc["quantization"]["exclude_modules"] if scheme == "nvfp4" else qc["ignore"]
    assert listed == summary["excluded"]
    tensors = load_file(str(tmp_path / scheme / "model.safetensors"))
    assert tensors["fc.weight"].dtype == (torch.uint8 if scheme == "nvfp4" else torch.int8)
    assert tensors["lilicorr.out_head.weight"].dtype == torch.bfloat16  # float-only stays float
    quant = load_draft(tmp_path / scheme, tiny_target.model.config)
    if scheme == "int8":
        assert isinstance(quant.fc, Int8Linear)
    ref = load_draft(src)
    x = torch.randn(3, ref.fc.in_features, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        rel = float((quant.fc(x) - ref.fc(x)).norm() / ref.fc(x).norm())
    assert rel < (0.15 if scheme == "nvfp4" else 0.03)
    prompts = [[5, 6, 7, 8], [100, 200, 300]]
    ar = build_engine(tiny_target).generate([Request(p, SamplingParams(max_tokens=12)) for p in prompts])
    spec = build_engine(tiny_target, None, quant).generate([Request(p, SamplingParams(max_tokens=12)) for p in prompts])
    assert [r.output_ids for r in spec] == [r.output_ids for r in ar]  # still lossless


def test_loader_rejects_bad_quantized_checkpoints(tiny_target, tmp_path):
    model = random_draft(tiny_target, lilicorr=True)
    export_quantized(model, tmp_path / "q", "int8")
    cfg_path = tmp_path / "q" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    # 1. the exclusion list misses a float-only module
    bad = json.loads(json.dumps(cfg))
    bad["quantization_config"]["ignore"].remove("lilicorr.out_head")
    cfg_path.write_text(json.dumps(bad))
    with pytest.raises(CheckpointError, match=r"misses float-only module\(s\) \['lilicorr.out_head'\]"):
        load_draft(tmp_path / "q")
    cfg_path.write_text(json.dumps(cfg))
    # 2. a float-only module is quantized
    path = tmp_path / "q" / "model.safetensors"
    t = load_file(str(path))
    w = t.pop("lilicorr.in_head.weight")
    q, s = quantize_int8(w.float())
    t["lilicorr.in_head.weight"], t["lilicorr.in_head.weight_scale"] = q, s.to(torch.bfloat16)
    save_file(t, str(path))
    with pytest.raises(CheckpointError, match="module 'lilicorr.in_head' is quantized but must stay floating point"):
        load_draft(tmp_path / "q")
    # 3. scales without a quantization_config
    del cfg["quantization_config"]
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no quantization_config"):
        load_draft(tmp_path / "q")
    # 4. an unknown quantization method
    cfg["quantization_config"] = {"quant_method": "awq"}
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="quant_method 'awq'"):
        load_draft(tmp_path / "q")
