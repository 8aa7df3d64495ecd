"""vLLM's own ModelOpt config parser reads our NVFP4 export: every float-only module excluded, the rest not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "models" / "tiny-s-lilicorr-long"


def test_vllm_modelopt_parser_excludes_every_float_only_module(tmp_path):
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    from lilicorr.checkpoint import load_draft
    from lilicorr.export.quantized import export_quantized

    if not (DRAFT / "config.json").exists():
        pytest.skip(f"{DRAFT} not in this checkout")
    summary = export_quantized(load_draft(DRAFT), tmp_path / "nvfp4", "nvfp4")
    qc = json.loads((tmp_path / "nvfp4" / "config.json").read_text())["quantization_config"]
    side = json.loads((tmp_path / "nvfp4" / "hf_quant_config.json").read_text())
    for cfg in (qc, side):
        parsed = ModelOptNvFp4Config.from_config(cfg)
        assert parsed.is_checkpoint_nvfp4_serialized and parsed.group_size == 16
        for name in summary["excluded"]:
            for prefix in ("", "model.", "draft_model.model."):  # runtime module paths add prefixes
                assert parsed.is_layer_excluded(prefix + name), prefix + name
        for name in summary["quantized"]:
            assert not parsed.is_layer_excluded(name), name
