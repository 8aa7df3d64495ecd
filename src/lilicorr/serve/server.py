"""Build and run the server from vLLM-style options (``lilicorr serve``)."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.checkpoint import load_draft
from lilicorr.decoding.engine import SpecConfig, SpecEngine
from lilicorr.serve.app import create_app
from lilicorr.serve.loop import EngineLoop
from lilicorr.serve.metrics import ServerMetrics
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET, SHIPPED_TARGET_NAME
from lilicorr.target.runtime import TargetRuntime, resolve_dtype

SPEC_KEYS = {"method", "model", "num_speculative_tokens", "draft_sample_method", "rejection_sample_method"}


def parse_speculative_config(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config is not valid JSON: {e.msg}") from e
    if not isinstance(cfg, dict):
        raise ValueError("--speculative-config must be a JSON object")
    unknown = set(cfg) - SPEC_KEYS
    if unknown:
        raise ValueError(f"--speculative-config: unknown keys {sorted(unknown)} (known: {sorted(SPEC_KEYS)})")
    if cfg.get("method", "dflash") not in ("dflash", "ar"):
        raise ValueError(
            f"--speculative-config: method {cfg['method']!r}: expected 'dflash' (LiLiCorr is chosen by "
            "the checkpoint's architecture, as in vLLM)"
        )
    if "model" not in cfg and cfg.get("method") != "ar":
        raise ValueError("--speculative-config: 'model' (the draft checkpoint folder) is required")
    return cfg


def build(
    target_dir: str | None,
    spec: dict | None,
    served_model_name: str | None = None,
    max_num_seqs: int = 8,
    max_model_len: int | None = None,
    dtype: str = "auto",
):
    """(app, loop) for a target and an optional speculative config; defaults: the shipped models."""
    if target_dir is None:
        target_dir = SHIPPED_TARGET
        served_model_name = served_model_name or SHIPPED_TARGET_NAME
        if spec is None and (Path(SHIPPED_DRAFT) / "config.json").exists():
            spec = {"method": "dflash", "model": SHIPPED_DRAFT}
    target = TargetRuntime.load(target_dir, dtype=resolve_dtype(dtype))
    draft = None
    cfg = SpecConfig()
    if spec and spec.get("method") != "ar":
        draft = load_draft(
            spec["model"],
            target.model.config,
            dtype=resolve_dtype(dtype),
            num_speculative_tokens=spec.get("num_speculative_tokens"),
        )
        cfg = SpecConfig(
            num_speculative_tokens=spec.get("num_speculative_tokens"),
            draft_sample_method=spec.get("draft_sample_method", "greedy"),
            rejection_sample_method=spec.get("rejection_sample_method", "standard"),
        )
    engine = SpecEngine(target, draft, cfg)
    name = served_model_name or target_dir
    limit = max_model_len or int(target.model.config.max_position_embeddings)
    loop = EngineLoop(engine, ServerMetrics(name), max_num_seqs=max_num_seqs)
    return create_app(loop, name, limit), loop
