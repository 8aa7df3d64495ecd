"""The drafter's context cache: per-layer K/V of the fused target features of accepted positions.

Like the target cache it grows to the right with a per-row valid mask, so a batch of requests with
different lengths and acceptances shares one tensor per layer. Only accepted positions are ever
written (the verify step knows how many), so there is no truncation; rows leave with
``select_rows`` and join with ``concat``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.models.backbone import KV
from lilicorr.runtime.cache import compaction_index, gather_columns, is_leave_order, move_rows, should_compact


@dataclass
class DraftContextCache:
    kv: list[KV]  # per layer ([batch, kv_heads, cols, hd], same)
    valid: torch.Tensor  # [batch, cols] bool

    @classmethod
    def empty(cls, batch: int, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> DraftContextCache:
        z = torch.zeros(batch, kv_heads, 0, head_dim, dtype=dtype)
        return cls(kv=[(z, z) for _ in range(layers)], valid=torch.zeros(batch, 0, dtype=torch.bool))

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]

    def append(self, new_kv: list[KV], new_valid: torch.Tensor) -> None:
        """Append columns ``[batch, n]`` (rows whose ``new_valid`` is False become holes)."""
        self.kv = [
            (torch.cat([k, nk], 2), torch.cat([v, nv], 2)) for (k, v), (nk, nv) in zip(self.kv, new_kv, strict=True)
        ]
        self.valid = torch.cat([self.valid, new_valid], 1)
        if should_compact(self.valid, int(self.valid.sum(1).max())):
            self.compact()

    def compact(self) -> None:
        """Squeeze holes out, live columns right-aligned in order."""
        src = compaction_index(self.valid, int(self.valid.sum(1).max()))  # [batch, cols]
        self.kv = [(gather_columns(k, src), gather_columns(v, src)) for k, v in self.kv]
        self.valid = torch.gather(self.valid, 1, src)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep the given rows; a ``leave_order`` selection (``runtime/cache.py``) moves only the rows that change
        slot, in place (every tensor here is this cache's own: ``append`` and ``concat`` make new ones; ``empty``'s
        shared tensor has no columns to move)."""
        order = rows.tolist()
        if is_leave_order(order):
            self.kv = [(move_rows(k, order), move_rows(v, order)) for k, v in self.kv]
        else:
            self.kv = [(k[rows], v[rows]) for k, v in self.kv]
        self.valid = self.valid[rows]

    @staticmethod
    def concat(a: DraftContextCache, b: DraftContextCache) -> DraftContextCache:
        """Stack two batches; the shorter one is left-padded with holes."""
        ta, tb = a.valid.shape[1], b.valid.shape[1]
        t = max(ta, tb)

        def pad(x: torch.Tensor, cols: int) -> torch.Tensor:
            if cols == t:
                return x
            z = torch.zeros(*x.shape[:2], t - cols, x.shape[3], dtype=x.dtype)
            return torch.cat([z, x], 2)

        kv = [
            (torch.cat([pad(ka, ta), pad(kb, tb)]), torch.cat([pad(va, ta), pad(vb, tb)]))
            for (ka, va), (kb, vb) in zip(a.kv, b.kv, strict=True)
        ]
        va = torch.cat([torch.zeros(a.batch_size, t - ta, dtype=torch.bool), a.valid], 1)
        vb = torch.cat([torch.zeros(b.batch_size, t - tb, dtype=torch.bool), b.valid], 1)
        return DraftContextCache(kv=kv, valid=torch.cat([va, vb]))
