"""A KV-cache layer that appends in place: transformers' ``DynamicLayer`` with spare capacity.

``DynamicLayer.update`` concatenates, so every decoding step copies the whole cache of every layer: SmolLM2-135M
at batch 16 with one 2 048-token row copied ≈ 1.5 GB a step, 0.7 s of a profiled 1.3 s step
(docs/results/smollm2-serving-notes.md). This layer keeps its keys and values in a buffer that grows by half again
when full (amortised O(1) per appended column) and exposes the filled part as a view, so the runtime's own cache
edits (``keep_new`` writing in place, ``compact`` replacing the tensors, ``crop``, ``select_rows`` moving a few rows
in place — ``keep_rows`` — or replacing the tensors) work as on
the layer it replaces. A sliding-window layer is replaced too: the runtime keeps every column and masks the
window itself (runtime/arch.py).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from lilicorr.runtime.cache import move_rows

SPARE_MIN = 64  # columns of headroom a grown buffer gets at least (one verify step never reallocates)


class GrowingLayer(DynamicLayer):
    """``keys`` / ``values`` ``[batch, kv_heads, length, dim]`` are views of buffers ``[…, capacity, dim]``."""

    def __init__(self, **kwargs):
        self._buf: dict[str, torch.Tensor | None] = {"keys": None, "values": None}
        self._len = {"keys": 0, "values": 0}  # each its own: the runtime replaces keys, then values
        super().__init__(**kwargs)

    def _view(self, name: str) -> torch.Tensor | None:
        buf = self._buf[name]
        return None if buf is None else buf[:, :, : self._len[name]]

    def _set(self, name: str, x: torch.Tensor | None) -> None:
        """Assignment (a compaction, a row selection) replaces the buffer; the next append that does not fit
        grows it."""
        self._buf[name] = x
        self._len[name] = 0 if x is None or x.dim() < 2 else x.shape[-2]

    keys = property(lambda self: self._view("keys"), lambda self, x: self._set("keys", x))
    values = property(lambda self: self._view("values"), lambda self, x: self._set("values", x))

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self._set("keys", None)
        self._set("values", None)
        self.is_initialized = True

    def _append(self, name: str, x: torch.Tensor) -> None:
        """Write ``x`` ``[batch, kv_heads, n, dim]`` after the filled part, growing the buffer by half when full."""
        buf, n = self._buf[name], self._len[name]
        end = n + x.shape[-2]
        if buf is None or end > buf.shape[-2]:
            cap = max(end + SPARE_MIN, (buf.shape[-2] * 3) // 2 if buf is not None else 0)
            new = x.new_empty(*x.shape[:2], cap, x.shape[3])  # [batch, kv_heads, cap, dim]
            if buf is not None and n:
                new[:, :, :n] = buf[:, :, :n]
            buf = self._buf[name] = new
        buf[:, :, n:end] = x
        self._len[name] = end

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append in place; returns the filled views ``[batch, kv_heads, length, dim]``."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._append("keys", key_states)
        self._append("values", value_states)
        return self.keys, self.values

    def keep_rows(self, order: list[int]) -> None:
        """Keep the rows ``order`` (``runtime.cache.is_leave_order``: the few rows that move come from beyond
        the new batch) in place: they are copied into their slots and the buffer's leading rows become the batch,
        so a finished request costs a copy of the rows that move, not of every row."""
        for name, n in self._len.items():
            buf = self._buf[name]
            if buf is not None:
                move_rows(buf[:, :, :n], order)  # the moved rows' filled columns, into their slots
                self._buf[name] = buf[: len(order)]  # the leading rows, capacity kept

    def get_seq_length(self) -> int:
        return self._len["keys"] if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Negative: drop that many trailing columns (the buffer keeps them as spare); positive: keep that many."""
        for name, n in self._len.items():
            keep = tokens_to_remove if tokens_to_remove > 0 else n + tokens_to_remove
            self._len[name] = max(0, min(n, keep))


def runtime_cache(config) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose attention layers are ``GrowingLayer``s; any other layer kind (an
    indexer's, a linear-attention state) stays transformers' own."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(x) in (DynamicLayer, DynamicSlidingWindowLayer) else x for x in cache.layers]
    return cache
