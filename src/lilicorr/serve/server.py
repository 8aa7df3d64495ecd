"""Build and run the server from vLLM-style options (``lilicorr serve``)."""

from __future__ import annotations

from pathlib import Path

from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.config import DEFAULT, ResolvedSpec, SpecConfig
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.serve.app import create_app
from lilicorr.serve.loop import EngineLoop
from lilicorr.serve.metrics import ServerMetrics
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET, SHIPPED_TARGET_NAME


def build(
    target_dir: str | None,
    spec: dict | SpecConfig | ResolvedSpec | None,
    served_model_name: str | None = None,
    max_num_seqs: int = 8,
    max_model_len: int | None = None,
    dtype: str = "auto",
    device: str = "cpu",
    load_policy: bool = True,
):
    """(app, loop) for a target and an optional speculative config; defaults: the shipped models.
    ``load_policy``: drafts adapt to load each step (``decoding/policy.py``); False: the config as given."""
    if target_dir is None:
        target_dir = SHIPPED_TARGET
        served_model_name = served_model_name or SHIPPED_TARGET_NAME
        if spec is None and (Path(SHIPPED_DRAFT) / "config.json").exists():
            spec = SpecConfig(method=DEFAULT, model=SHIPPED_DRAFT)  # resolved once, in the engine factory
    target = TargetRuntime.load(target_dir, dtype=resolve_dtype(dtype), device=device)
    engine = engine_from_speculative_config(target, spec, resolve_dtype(dtype))
    name = served_model_name or target_dir
    limit = max_model_len or int(target.model.config.max_position_embeddings)
    loop = EngineLoop(engine, ServerMetrics(name), max_num_seqs=max_num_seqs, load_policy=load_policy)
    return create_app(loop, name, limit), loop
