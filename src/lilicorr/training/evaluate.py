"""Held-out metrics of a finished drafter (``lilicorr train eval``), computed exactly as training validates.

Why: two drafters trained on different data (e.g. the v2 and v3 recipes, whose own validations ran on
different held-out rows) can only be compared on the *same* blocks. This re-runs ``validate`` — same rows,
same fixed anchor seed, full vocabulary — on any checkpoint folder, so its figures line up with a training
run's curve and with every other checkpoint evaluated on the same file.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.batches import Batches
from lilicorr.training.draft import DraftStep
from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.validation import validate

# Options of the drafter's own training run that change what validation computes (its loss weighting);
# the accuracies and the τ estimate do not depend on them.
LOSS_OPTIONS = ("gamma", "kd_weight", "head_weights", "candidate_topk", "bf16")


def _training_options(draft: Path) -> dict:
    """The loss options the drafter was trained with (``training_summary.json``), or none (defaults)."""
    summary = draft / "training_summary.json"
    if not summary.exists():
        return {}
    config = json.loads(summary.read_text()).get("config", {})
    out = {k: config[k] for k in LOSS_OPTIONS if k in config}
    if isinstance(out.get("head_weights"), dict):
        from lilicorr.training.losses import HeadLossWeights

        out["head_weights"] = HeadLossWeights(**out["head_weights"])
    return out


def evaluate_draft(
    draft: str | Path,
    target: str | Path,
    data: str | Path,
    features: str | Path | None = None,
    val_sequences: int = 64,
    batch_size: int = 8,
    threads: int = 0,
    runtime: TargetRuntime | None = None,
) -> dict:
    """Validation metrics of ``draft`` on the first ``val_sequences`` rows of ``data`` (as ``validate`` returns
    them: τ estimate, slot accuracy, neighbour-same rate, losses, per kind of row where both are held out).
    ``runtime``: the target already loaded (several drafters evaluated in turn load it once)."""
    if threads:
        torch.set_num_threads(threads)
    draft = Path(draft)
    runtime = runtime or TargetRuntime.load(str(target))
    model = load_draft(draft, runtime.model.config)  # validated whole: a bad folder raises, nothing partial
    cfg = DraftTrainConfig(
        target=str(target),
        data=str(data),
        out="",
        mode="lilicorr" if model.is_lilicorr else "dflash",
        features=str(features) if features else None,
        max_sequences=val_sequences,
        val_sequences=val_sequences,
        batch_size=batch_size,
        **_training_options(draft),
    )
    batches = Batches(cfg, model.cfg.target_layer_ids, "cpu")
    if len(batches) < val_sequences:
        raise ValueError(f"{data}: {len(batches)} rows, fewer than the {val_sequences} held-out rows asked for")
    step_fn = DraftStep(cfg, runtime, model)
    out = validate(step_fn, batches, torch.arange(val_sequences), cfg)
    return {"draft": str(draft), "data": str(data), "val_sequences": val_sequences, "mode": cfg.mode, **out}
