"""The batched KV cache with holes: which columns hold a live token of each row, and the helpers that
pad, compact and gather it (``TargetRuntime`` and the drafter's context cache share them)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def pad_right(seqs: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists: ids ``[batch, max_len]`` and real-token mask ``[batch, max_len]``."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), n, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids, mask


def should_compact(valid: torch.Tensor, live_max: int) -> bool:
    """Compact once a cache is over 64 columns and more than half holes (amortised: O(1) per token)."""
    return valid.shape[1] > 64 and valid.shape[1] > 2 * live_max


def compaction_index(valid: torch.Tensor, cols: int) -> torch.Tensor:
    """Source column of each kept column ``[batch, cols]``: live columns right-aligned in order, so
    rows shorter than ``cols`` keep holes on the left (where left padding already is)."""
    order = torch.sort(valid.long(), dim=1, stable=True).indices  # holes first, then live, stable
    return order[:, valid.shape[1] - cols :]


def gather_columns(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``x [batch, heads, columns, dim]`` at columns ``src [batch, cols]``."""
    b, cols = src.shape
    return torch.gather(x, 2, src[:, None, :, None].expand(b, x.shape[1], cols, x.shape[3]))


def leave_order(keep: list[int]) -> list[int]:
    """The rows' new order when only ``keep`` (ascending) of a batch's rows stay: a kept row below the new size
    stays in its slot, and each slot a leaving row frees there takes a kept row from beyond it. A cache then moves
    only those few rows into place and drops its tail (``is_leave_order``), where keeping ``keep`` in order moved
    every row: at 32 rows on SmolLM2 a finished request cost a 77 ms copy of the whole cache, for every row
    (docs/results/smollm2-serving-notes.md)."""
    m, kept = len(keep), set(keep)
    order = list(range(m))
    freed = [i for i in range(m) if i not in kept]
    for slot, row in zip(freed, [r for r in keep if r >= m], strict=True):
        order[slot] = row
    return order


def is_leave_order(order: list[int]) -> bool:
    """``order`` keeps each row it does not move in place and moves rows only from beyond its length, once each:
    such a selection can be done in place (no moved row is overwritten before it is read)."""
    m = len(order)
    return len(set(order)) == m and all(src == dst or src >= m for dst, src in enumerate(order))


def move_rows(x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """``x [batch, …]`` at rows ``order`` (an ``is_leave_order``): the moved rows are copied into their slots in
    place and the result is a view of ``x``'s leading rows."""
    for dst, src in enumerate(order):
        if dst != src:
            x[dst] = x[src]
    return x[: len(order)]


@dataclass
class CacheState:
    """Per-batch decoding state: HF cache plus which columns hold a live token of each row."""

    cache: object  # transformers.DynamicCache
    valid: torch.Tensor  # [batch, columns] bool
    lengths: torch.Tensor  # [batch] int64: live tokens per row (= next RoPE position)

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]
