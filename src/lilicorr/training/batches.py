"""The sequences a drafter trains on (``Batches``: tokens, loss masks and cached target features by row) and which
rows train (``training_rows``): the first ``n_val`` rows are held out."""

from __future__ import annotations

import torch

from lilicorr.datagen.regenerate import load_regenerated, rows_of_kind
from lilicorr.training.draft_config import DraftTrainConfig


class Batches:
    """Training sequences by index, with their cached features when there is a cache, on the device."""

    def __init__(self, cfg: DraftTrainConfig, layer_ids: list[int], device: str):
        data = load_regenerated(cfg.data)
        rows = slice(0, cfg.max_sequences or None)
        self.tokens, self.mask = data["tokens"][rows].long(), data["loss_mask"][rows].bool()
        self.sampled = data["sampled"][rows].bool()  # [rows]: the answer was sampled at T=1 (else greedy)
        self.store = None
        if cfg.features:
            from lilicorr.features.cache import FeatureStore

            self.store = FeatureStore(cfg.features, data["tokens"], layer_ids, cfg.max_sequences)
            self.tokens, self.mask = self.tokens[:, : self.store.length], self.mask[:, : self.store.length]
        self.device = device

    def __len__(self) -> int:
        return len(self.tokens)

    def get(self, idx: torch.Tensor, length: int | None = None):
        """Rows ``idx``, their first ``length`` columns (default all): a batch whose blocks end early needs
        neither the padding nor the features after them."""
        cols = slice(0, length)
        feats = self.store.get(idx, length) if self.store is not None else None
        return self.tokens[idx, cols].to(self.device), self.mask[idx, cols], feats


def training_rows(sampled: torch.Tensor, n_val: int, which: str) -> torch.Tensor:
    """Indices of the rows that train: all after the ``n_val`` held-out ones, or only the greedy (T=0) or
    sampled (T=1) ones among them. An empty choice is an error, not a silent fallback to every row."""
    rows = torch.arange(n_val, len(sampled))
    keep = rows_of_kind(sampled[rows], which)
    if not bool(keep.any()):
        raise ValueError(f"--train-rows {which}: no {which} row among the {len(rows)} training rows of the data")
    return rows[keep]
