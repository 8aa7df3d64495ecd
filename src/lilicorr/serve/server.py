"""Build and run the server from vLLM-style options (``lilicorr serve``)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.decoding.engine import SpecConfig, SpecEngine
from lilicorr.serve.app import create_app
from lilicorr.serve.loop import EngineLoop
from lilicorr.serve.metrics import ServerMetrics
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET, SHIPPED_TARGET_NAME
from lilicorr.target.runtime import TargetRuntime, resolve_dtype

SPEC_KEYS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_sample_method",
    "rejection_sample_method",
    "prompt_lookup_max",  # ngram (vLLM's keys)
    "prompt_lookup_min",
    "tree_budget",  # ddtree, lilicorr-tree (ours): nodes per tree, root included
}
# dflash: the checkpoint decides DFlash, LiLiCorr (its architecture) or a comparison arm (arm.json), as in vLLM
SPEC_METHODS = ("dflash", "ar", "ngram", "ddtree", "lilicorr-tree")


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
    method = cfg.get("method", "dflash")
    if method not in SPEC_METHODS:
        raise ValueError(
            f"--speculative-config: method {method!r}: expected one of {', '.join(SPEC_METHODS)} (LiLiCorr and "
            "comparison arms are chosen by the dflash checkpoint itself, as in vLLM)"
        )
    if "model" not in cfg and method not in ("ar", "ngram"):
        raise ValueError(f"--speculative-config: method {method!r} needs 'model' (the draft checkpoint folder)")
    for key, ok in (
        ("prompt_lookup_max", method == "ngram"),
        ("prompt_lookup_min", method == "ngram"),
        ("tree_budget", method in ("ddtree", "lilicorr-tree")),
    ):
        if key in cfg and not ok:
            raise ValueError(f"--speculative-config: '{key}' does not apply to method {method!r}")
        if key in cfg and (isinstance(cfg[key], bool) or not isinstance(cfg[key], int) or cfg[key] < 1):
            raise ValueError(f"--speculative-config: '{key}' must be a positive integer, got {cfg[key]!r}")
    return cfg


def build_engine(target: TargetRuntime, spec: dict | None, dtype: torch.dtype) -> SpecEngine:
    """The engine a speculative config asks for; every method the engine has is servable."""
    if not spec or spec.get("method") == "ar":
        return SpecEngine(target)
    method = spec.get("method", "dflash")
    n = spec.get("num_speculative_tokens")
    if method == "ngram":
        cfg = SpecConfig(
            method="ngram",
            num_speculative_tokens=n or 4,
            prompt_lookup_max=spec.get("prompt_lookup_max", 4),
            prompt_lookup_min=spec.get("prompt_lookup_min", 1),
        )
        return SpecEngine(target, None, cfg)
    draft = load_draft(spec["model"], target.model.config, dtype=dtype, num_speculative_tokens=n)
    cfg = SpecConfig(
        num_speculative_tokens=n,
        draft_sample_method=spec.get("draft_sample_method", "greedy"),
        rejection_sample_method=spec.get("rejection_sample_method", "standard"),
    )
    if method in ("ddtree", "lilicorr-tree"):
        from lilicorr.decoding.tree import DDTreeEngine

        cfg.method = "dflash"
        return DDTreeEngine(target, draft, cfg, budget=spec.get("tree_budget", 16), lattice=method == "lilicorr-tree")
    if (Path(spec["model"]) / "arm.json").exists():  # a comparison arm saved beside a DFlash backbone
        from lilicorr.decoding.proposers import ArmProposer
        from lilicorr.models.arms import load_arm

        proposer = ArmProposer(load_arm(Path(spec["model"]), dtype), target.embed_tokens, cfg.draft_sample_method)
        return SpecEngine(target, draft, cfg, proposer=proposer)
    return SpecEngine(target, draft, cfg)


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
    engine = build_engine(target, spec, resolve_dtype(dtype))
    name = served_model_name or target_dir
    limit = max_model_len or int(target.model.config.max_position_embeddings)
    loop = EngineLoop(engine, ServerMetrics(name), max_num_seqs=max_num_seqs)
    return create_app(loop, name, limit), loop
