"""The drafter's half of the engine: its context cache, the taps that plain steps defer, and the block pass.

The engine (``engine.py``) owns the batch, the target cache and verification; this object owns what
only a drafter-based method needs, so the engine's loop reads as draft → verify → commit. Invariant per
running row: the context cache holds the fused target features of every committed position except the
pending token, except that the taps of steps run without the drafter (the draft gate's or the load
policy's plain steps) wait in ``deferred`` — one token per row and step — and are fused in one batched
pass before the drafter next runs, or after ``DEFER_LIMIT`` such steps, so a long run of plain steps
(a loaded server) holds bounded memory and costs what plain AR steps cost.
"""

from __future__ import annotations

import torch

from lilicorr.decoding.draft_cache import DraftContextCache
from lilicorr.decoding.draft_vocab import VocabHead
from lilicorr.decoding.proposal import DraftOutput
from lilicorr.decoding.verify import Verdict
from lilicorr.models.draft import DraftModel
from lilicorr.models.layers import over_rows
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.runtime.threads import step_threads

DEFER_LIMIT = 64  # paused steps whose taps wait before they are fused anyway (one batched pass)


class DraftSide:
    def __init__(self, draft: DraftModel, target: TargetRuntime, draft_vocab: torch.Tensor | None = None):
        """``draft_vocab`` ``[V']``: the token ids the drafter drafts from (None: all)."""
        self.draft, self.target = draft, target
        head = draft.lm_head if draft.lm_head is not None else target.lm_head  # its own LM head, or the target's
        self.head = VocabHead(head.weight, draft_vocab) if draft_vocab is not None else head
        self.dtype = next(draft.parameters()).dtype
        self.cache: DraftContextCache | None = None
        self.deferred: list[torch.Tensor] = []  # taps [batch, 1, taps] of paused steps, not yet fused
        self.deferred_start: torch.Tensor | None = None  # [batch] position of the first deferred tap

    # -- batch membership -------------------------------------------------------------------------
    def context(self, taps: torch.Tensor, start: torch.Tensor, valid: torch.Tensor):
        """Fuse taps of rows ``[batch, n]`` at positions ``start + i`` into a new cache chunk; returns
        ``(chunk, fused rows [batch, n, Hm])``."""
        with step_threads(taps.shape[0], taps.shape[1]):
            ctx = self.draft.fuse(taps.to(self.dtype))  # [batch, n, Hm]
            pos = start[:, None] + torch.arange(taps.shape[1])[None]
            cfg = self.draft.cfg
            chunk = DraftContextCache.empty(
                taps.shape[0], cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, self.dtype
            )
            chunk.append(self.draft.context_kv(ctx, pos), valid)
        return chunk, ctx

    def join(self, chunk: DraftContextCache) -> torch.Tensor | None:
        """New rows (a prefilled chunk) join below the running ones. The running rows' deferred taps are
        fused first, since the joining rows have none; returns the running rows' new anchors (or None)."""
        if self.cache is None:
            self.cache = chunk
            return None
        anchors = self.fuse_deferred()
        self.cache = DraftContextCache.concat(self.cache, chunk)
        return anchors

    def select_rows(self, rows: torch.Tensor) -> None:
        if self.cache is not None:
            self.cache.select_rows(rows)
        if self.deferred_start is not None:
            self.deferred = [t[rows] for t in self.deferred]
            self.deferred_start = self.deferred_start[rows]

    def clear(self) -> None:
        self.cache, self.deferred, self.deferred_start = None, [], None

    # -- after a verify ---------------------------------------------------------------------------
    def defer(self, taps: torch.Tensor, start: torch.Tensor) -> torch.Tensor | None:
        """Keep a plain step's taps ``[batch, 1, taps]`` (its one committed token per row) for later fusion;
        returns the new anchors ``[batch, Hm]`` when ``DEFER_LIMIT`` forced a fusion, else None."""
        if self.deferred_start is None:
            self.deferred_start = start.clone()
        self.deferred.append(taps[:, :1])
        return self.fuse_deferred() if len(self.deferred) >= DEFER_LIMIT else None

    @property
    def waiting_taps(self) -> int:
        """Taps of plain steps not yet fused (rows × paused steps)."""
        return len(self.deferred) * (len(self.deferred_start) if self.deferred_start is not None else 0)

    def fuse_deferred(self) -> torch.Tensor | None:
        """Fuse the deferred taps in one pass (positions ``start … start + m − 1`` per row: every row
        committed one token a step); returns the new anchors ``[batch, Hm]``, None when nothing waited."""
        if self.deferred_start is None:
            return None
        assert self.cache is not None
        taps = torch.cat(self.deferred, 1)  # [batch, m, taps]
        valid = torch.ones(taps.shape[:2], dtype=torch.bool)
        chunk, ctx = self.context(taps, self.deferred_start, valid)
        self.cache.append(chunk.kv, valid)
        self.deferred, self.deferred_start = [], None
        return ctx[:, -1]

    def extend(self, taps: torch.Tensor, start: torch.Tensor, verdicts: list[Verdict]) -> torch.Tensor:
        """Fuse the taps of each row's accepted path into the cache; returns the fused rows ``[batch, L, Hm]``."""
        assert self.cache is not None
        b, longest = len(verdicts), max(len(v.path) for v in verdicts)
        rows = torch.zeros(b, longest, dtype=torch.long)  # [batch, L]: verify positions of the path
        valid = torch.zeros(b, longest, dtype=torch.bool)
        for row, v in enumerate(verdicts):
            rows[row, : len(v.path)] = torch.tensor(v.path)
            valid[row, : len(v.path)] = True
        path_taps = torch.gather(taps, 1, rows[..., None].expand(b, longest, taps.shape[-1]))
        chunk, ctx = self.context(path_taps, start, valid)
        self.cache.append(chunk.kv, valid)
        return ctx

    # -- the block pass ---------------------------------------------------------------------------
    def block(
        self, pending: torch.Tensor, start: torch.Tensor, n: int, anchor: torch.Tensor, rows: list[int] | None = None
    ) -> DraftOutput:
        """One drafter pass over ``[pending, MASK × n]`` per row (of ``rows``, None: all): hidden states and
        logits of the mask slots; ``anchor`` ``[batch, Hm]`` are those rows' anchors."""
        assert self.cache is not None
        kv, valid = self.cache.kv, self.cache.valid
        if rows is not None:
            kv, valid = [(k[rows], v[rows]) for k, v in kv], valid[rows]
        block = torch.cat([pending[:, None], torch.full((len(pending), n), self.draft.cfg.mask_token_id)], 1)
        emb = self.target.embed_tokens(block).to(self.dtype)  # [batch, n+1, H]
        pos = start[:, None] + torch.arange(n + 1)[None]
        with step_threads(len(pending), n + 1):  # the layers: small operators, as the target's (runtime/threads.py)
            hidden = self.draft.draft_block(emb, pos, kv, valid)[:, 1:]  # [batch, n, Hm]
        logits = over_rows(self.head, hidden.to(self.head.weight.dtype)).float()  # [batch, n, V]
        return DraftOutput(
            hidden=hidden,
            logits=logits,
            anchor=anchor,
            anchor_valid=torch.ones(len(pending), dtype=torch.bool),
            anchor_tokens=pending,
        )
