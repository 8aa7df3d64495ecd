"""Build and run the server from vLLM-style options (``lilicorr serve``)."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.decoding.methods import FASTEST, engine_from_speculative_config
from lilicorr.decoding.methods import parse_speculative_config as to_spec_config
from lilicorr.serve.app import create_app
from lilicorr.serve.loop import EngineLoop
from lilicorr.serve.metrics import ServerMetrics
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET, SHIPPED_TARGET_NAME
from lilicorr.target.runtime import TargetRuntime, resolve_dtype


def parse_speculative_config(text: str | None) -> dict | None:
    """The ``--speculative-config`` JSON text as an object, checked against the methods registry now, so a
    wrong key or method stops the server at start-up with a named error."""
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config is not valid JSON: {e.msg}") from e
    try:
        to_spec_config(cfg)
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from e
    return cfg


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
            method, options = FASTEST["lilicorr"]  # the fastest lossless configuration measured
            spec = {"method": method, "model": SHIPPED_DRAFT, **options}
    target = TargetRuntime.load(target_dir, dtype=resolve_dtype(dtype), device=device)
    engine = engine_from_speculative_config(target, spec, resolve_dtype(dtype))
    name = served_model_name or target_dir
    limit = max_model_len or int(target.model.config.max_position_embeddings)
    loop = EngineLoop(engine, ServerMetrics(name), max_num_seqs=max_num_seqs)
    return create_app(loop, name, limit), loop
