"""Edits of a ``CacheState`` after a step: the target's KV cache and its per-row live columns move together.

Why a module of its own: a step's forward (``runtime.py``) only appends columns; every later change — keeping an
accepted tree path, dropping rejected drafts, squeezing holes out, rows leaving or joining the batch — is here,
and each ends the same way (``crop_holes``): trailing columns that are holes in every row are cropped (no copy),
and the cache is compacted once holes pile up (``should_compact``).
"""

from __future__ import annotations

import torch

from lilicorr.runtime.cache import CacheState, compaction_index, gather_columns, is_leave_order, should_compact
from lilicorr.runtime.folder import TargetError


def crop_holes(state: CacheState, device: torch.device | str) -> None:
    """Drop trailing columns that are holes in every row (a plain crop), then compact if holes piled up."""
    any_live = state.valid.any(0)
    last = int(any_live.nonzero().max()) + 1 if any_live.any() else 0
    if last < state.valid.shape[1]:
        state.cache.crop(last - state.valid.shape[1])  # negative: number of columns to drop
        state.valid = state.valid[:, :last]
    if should_compact(state.valid, int(state.lengths.max())):
        compact(state, device)


def compact(state: CacheState, device: torch.device | str) -> None:
    """Squeeze holes out: live tokens of each row packed to the right, in order."""
    src = compaction_index(state.valid, int(state.lengths.max()))  # [batch, cols]
    on_device = src.to(device)
    for layer in state.cache.layers:
        for name in ("keys", "values"):
            setattr(layer, name, gather_columns(getattr(layer, name), on_device))  # [batch, kv_heads, cols, d]
    state.valid = torch.gather(state.valid, 1, src)


def keep_path(state: CacheState, keep: torch.Tensor, device: torch.device | str) -> None:
    """Of the last ``keep.shape[1]`` columns keep only those marked (an accepted tree path).

    The kept columns are first moved to the front of that tail, in order (O(n) per layer; the cached keys carry
    their rotary positions, so a column can move), and the tail's end is cropped: at batch 1 the cache then has
    no holes, and attention keeps its unmasked path — a hole left by a tree step made every later step of the
    request ≈ 7 % slower (fp32, 2-core AMD EPYC), plain steps of a paused draft gate included. A path already
    first in every row (nothing accepted, or the best-first main line) moves nothing: the 2 · layers gathers
    took 1.5–1.9 ms of a drafting step of SmolLM2's 8-node tree (Zen 4)."""
    n = keep.shape[1]
    if bool((keep[:, 1:] & ~keep[:, :-1]).any()):  # a kept column after a dropped one: move them forward
        order = torch.sort((~keep).long(), dim=1, stable=True).indices  # [batch, n]: kept columns first, in order
        tail = order.to(device)
        for layer in state.cache.layers:
            for name in ("keys", "values"):
                x = getattr(layer, name)  # [batch, kv_heads, cols, d]
                x[:, :, -n:] = gather_columns(x[:, :, -n:], tail)
        keep = torch.gather(keep, 1, order)
    state.lengths = state.lengths - n + keep.sum(1)
    state.valid = torch.cat([state.valid[:, :-n], keep], dim=1)
    crop_holes(state, device)


def truncate(state: CacheState, keep: torch.Tensor, device: torch.device | str) -> None:
    """Keep only the first ``keep[b]`` live tokens of each row (drop rejected drafts)."""
    if (keep > state.lengths).any():
        raise TargetError(f"truncate: keep {keep.tolist()} exceeds lengths {state.lengths.tolist()}")
    live_rank = state.valid.long().cumsum(1)  # [batch, columns]: 1-based rank of each live column
    state.valid = state.valid & (live_rank <= keep[:, None])
    state.lengths = keep.clone()
    crop_holes(state, device)


def select_rows(state: CacheState, rows: torch.Tensor, device: torch.device | str) -> None:
    """Keep only the given batch rows (a finished request leaves the batch). A ``leave_order`` selection
    (``runtime/cache.py``) moves only the rows that change slot, in place; any other copies every row."""
    order = rows.tolist()
    in_place = is_leave_order(order)
    for layer in state.cache.layers:
        if in_place and hasattr(layer, "keep_rows"):  # a GrowingLayer (runtime/kv_layer.py)
            layer.keep_rows(order)
        else:
            layer.reorder_cache(rows.to(device))
    state.valid = state.valid[rows]
    state.lengths = state.lengths[rows]


def concat_states(a: CacheState, b: CacheState, state: CacheState) -> CacheState:
    """Stack two batches into ``state`` (new and empty, of both sizes; requests joining a running batch); the
    shorter is left-padded with holes."""
    ta, tb = a.valid.shape[1], b.valid.shape[1]
    t = max(ta, tb)

    def pad(x: torch.Tensor, cols: int) -> torch.Tensor:
        if cols == t:
            return x
        return torch.cat([x.new_zeros(*x.shape[:2], t - cols, x.shape[3]), x], 2)

    for i, (la, lb) in enumerate(zip(a.cache.layers, b.cache.layers, strict=True)):
        k = torch.cat([pad(la.keys, ta), pad(lb.keys, tb)])
        v = torch.cat([pad(la.values, ta), pad(lb.values, tb)])
        state.cache.update(k, v, i)
    state.valid = torch.cat(
        [
            torch.cat([torch.zeros(a.batch_size, t - ta, dtype=torch.bool), a.valid], 1),
            torch.cat([torch.zeros(b.batch_size, t - tb, dtype=torch.bool), b.valid], 1),
        ]
    )
    state.lengths = torch.cat([a.lengths, b.lengths])
    return state
