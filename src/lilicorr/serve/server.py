"""Build and run the server from vLLM-style options (``lilicorr serve``)."""

from __future__ import annotations

from pathlib import Path

from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.config import default_config
from lilicorr.runtime.runtime import TargetRuntime, resolve_dtype
from lilicorr.serve.app import create_app
from lilicorr.serve.loop import EngineLoop
from lilicorr.serve.metrics import ServerMetrics
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET, SHIPPED_TARGET_NAME


def build(
    target_dir: str | None,
    spec: dict | None,
    served_model_name: str | None = None,
    max_num_seqs: int = 8,
    max_model_len: int | None = None,
    dtype: str = "auto",
    device: str = "cpu",
):
    """(app, loop) for a target and an optional speculative config; defaults: the shipped models."""
    if target_dir is None:
        target_dir = SHIPPED_TARGET
        served_model_name = served_model_name or SHIPPED_TARGET_NAME
        if spec is None and (Path(SHIPPED_DRAFT) / "config.json").exists():
            spec = default_config(SHIPPED_DRAFT)
    target = TargetRuntime.load(target_dir, dtype=resolve_dtype(dtype), device=device)
    engine = engine_from_speculative_config(target, spec, resolve_dtype(dtype))
    name = served_model_name or target_dir
    limit = max_model_len or int(target.model.config.max_position_embeddings)
    loop = EngineLoop(engine, ServerMetrics(name), max_num_seqs=max_num_seqs)
    return create_app(loop, name, limit), loop
