"""Which rows a feature cache holds, and how many columns of each: shared by the extraction (``features.cache``) and
by the reuse of another cache's shards (``features.reuse``), which must agree on both to call a shard the same."""

from __future__ import annotations

import hashlib

import torch


def data_digest(tokens: torch.Tensor) -> str:
    """A short fingerprint of a data file's tokens ``[rows, L]``: a cache records it to notice a changed file."""
    return hashlib.sha256(tokens.to(torch.int32).numpy().tobytes()).hexdigest()[:16]


def row_lengths(loss_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the columns its blocks can read: its last supervised column + 1 (at least 1). ``[rows]``"""
    cols = torch.arange(loss_mask.shape[1]).expand_as(loss_mask)
    return ((cols + 1) * loss_mask).amax(1).clamp_min(1).long()
