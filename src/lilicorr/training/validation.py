"""Held-out validation of a drafter (``validate``), shared by training's curves and ``lilicorr train eval``: the same
rows and the same fixed blocks for every recipe, so figures from different runs line up."""

from __future__ import annotations

from typing import Any

import torch

from lilicorr.training.batches import Batches
from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.losses import sample_anchors


def summarize_metrics(sums: dict[str, torch.Tensor], block: int) -> dict:
    blocks = max(float(sums["m_blocks"]), 1.0)  # no valid block (nothing supervised): zeros, not a crash
    out = {
        "blocks": int(sums["m_blocks"]),
        "slot_acc": [round(float(x) / blocks, 4) for x in sums["m_slot_acc"]],
        "top1_prefix": round(float(sums["m_top1_prefix"]) / blocks, 4),
        "tau_top1_estimate": round(1 + float(sums["m_top1_prefix"]) / blocks, 4),
        "neighbour_same": round(float(sums["m_neighbour_same"]) / blocks, 4),
    }
    if "m_oracle_prefix" in sums:
        out["oracle_prefix"] = round(float(sums["m_oracle_prefix"]) / blocks, 4)
        out["in_lattice"] = [round(float(x) / blocks, 4) for x in sums["m_in_lattice"]]
    if "m_walk_prefix" in sums:
        out["walk_prefix"] = round(float(sums["m_walk_prefix"]) / blocks, 4)
    if "m_t1_prefix" in sums:
        out["tau_t1_estimate"] = round(1 + float(sums["m_t1_prefix"]) / blocks, 4)
    return out


VAL_ANCHORS = 32  # blocks per held-out sequence, fixed so that runs with other --anchors validate alike


@torch.no_grad()
def validate(step_fn: Any, batches: Batches, val_idx: torch.Tensor, cfg: DraftTrainConfig) -> dict:
    """Held-out metrics over all validation rows, and per kind of row ("greedy": answers continued at T=0,
    what T=0 decoding is judged on; "sampled": at T=1) where both kinds are held out. The blocks are the
    same for every recipe (fixed seed, anchors drawn per batch before the rows are split by kind)."""
    step_fn.model.eval()
    gen = torch.Generator().manual_seed(12345)
    sums: dict[str, dict[str, torch.Tensor]] = {"greedy": {}, "sampled": {}}
    for i in range(0, len(val_idx), cfg.batch_size):
        rows = val_idx[i : i + cfg.batch_size]
        tk, mk, feats = batches.get(rows)
        anchors, valid = sample_anchors(mk, VAL_ANCHORS, step_fn.block, gen)  # the same blocks for every recipe
        kinds = batches.sampled[rows]  # [rows]
        for kind, keep in (("greedy", ~kinds), ("sampled", kinds)):
            if not bool(keep.any()):
                continue
            sub = keep.nonzero().squeeze(1).to(tk.device)
            res = step_fn(
                tk[sub],
                mk[keep],
                anchors[keep].to(tk.device),
                valid[keep].to(tk.device),
                want_metrics=True,
                feats=None if feats is None else tuple(f[keep.to(f.device)] for f in feats),  # (taps, final)
            )
            for k, v in res.items():
                sums[kind][k] = sums[kind].get(k, 0) + v.detach().cpu()
    step_fn.model.train()
    total = {k: sums["greedy"].get(k, 0) + sums["sampled"].get(k, 0) for k in {*sums["greedy"], *sums["sampled"]}}
    out = _val_summary(total, step_fn.block)
    if sums["greedy"] and sums["sampled"]:
        for kind in ("greedy", "sampled"):
            out[kind] = _val_summary(sums[kind], step_fn.block)
    return out


def _val_summary(sums: dict[str, torch.Tensor], block: int) -> dict:
    out = summarize_metrics(sums, block)
    if "dflash_sum" in sums:
        out["dflash_loss"] = round(float(sums["dflash_sum"] / sums["dflash_den"].clamp_min(1e-6)), 4)
    if "head_sum" in sums:
        out["head_loss"] = round(float(sums["head_sum"] / sums["head_den"].clamp_min(1)), 4)
    return out
