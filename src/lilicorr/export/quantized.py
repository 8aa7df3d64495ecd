"""Quantized drafter folders that vLLM and SGLang load: NVFP4 (ModelOpt layout, weight-only, group 16) and
int8 (W8A8 compressed-tensors). The float-only modules of the LiLiCorr head stay bf16 and are written as
exclusions; ``checkpoint/quant.py`` holds the formats (quantizers, configs, the loader's checks)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from lilicorr.checkpoint.quant import (
    SCHEMES,
    float_modules,
    linear_modules,
    must_stay_float,
    quantization_config,
    quantize_int8,
    quantize_nvfp4,
)
from lilicorr.data.atomic import atomic_write_dir


def export_quantized(model: nn.Module, out, scheme: str, source: str = "") -> dict:
    """Write ``model`` (a ``DraftModel``) quantized with ``scheme``; returns {quantized, excluded} module lists.

    Float tensors are stored in bf16. The folder appears whole or not at all.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"quantization {scheme!r}: expected one of {SCHEMES}")
    excluded = float_modules(model)
    targets = [n for n in linear_modules(model) if not must_stay_float(n) and not n.startswith("lm_head")]
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    for name in targets:
        w = tensors.pop(f"{name}.weight").float()
        if scheme == "nvfp4":
            packed, scale, global_scale = quantize_nvfp4(w)
            tensors[f"{name}.weight"] = packed
            tensors[f"{name}.weight_scale"] = scale
            tensors[f"{name}.weight_scale_2"] = global_scale
        else:
            q, scale = quantize_int8(w)
            tensors[f"{name}.weight"] = q
            tensors[f"{name}.weight_scale"] = scale.to(torch.bfloat16)
    cfg = model.cfg.to_dict()
    cfg["torch_dtype"] = "bfloat16"
    cfg["quantization_config"] = quantization_config(scheme, excluded)
    summary = {"scheme": scheme, "source": source, "quantized": targets, "excluded": excluded}

    def write(tmp: Path) -> None:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "quantization": scheme})
        if scheme == "nvfp4":  # ModelOpt's own side file, read by vLLM as well
            (tmp / "hf_quant_config.json").write_text(json.dumps(cfg["quantization_config"], indent=2) + "\n")
        (tmp / "quantization_summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    atomic_write_dir(Path(out), write)
    return summary
