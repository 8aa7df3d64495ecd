"""The speculative decoding engine: prefill → draft block → propose → verify → commit, batched.

One loop for everything (generate, bench, serve). Requests join (``add``) and leave between steps,
each row with its own length, acceptance and sampling settings. Invariants per running request:

- the target cache holds every committed token except the newest one (``pending``), which has
  been emitted but not yet run through the target;
- the draft context cache holds the fused target features of exactly those positions
  (the pending token has no features yet), so its length equals the target's;
- ``anchor`` is the fused feature row of the last accepted position, which the LiLiCorr head uses
  for its start scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.checkpoint import check_num_speculative_tokens
from lilicorr.decoding.draft_cache import DraftContextCache
from lilicorr.decoding.proposers import (
    AutoregressiveProposer,
    DFlashProposer,
    DraftOutput,
    LiLiCorrProposer,
    Proposer,
)
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import choose_token, target_probs
from lilicorr.decoding.stats import SpecStats, StageTimer
from lilicorr.decoding.verify import verify_block, verify_greedy, verify_standard
from lilicorr.models.draft import DraftModel
from lilicorr.target.runtime import CacheState, TargetRuntime, pad_right

REJECTION_METHODS = ("standard", "block")


@dataclass
class SpecConfig:
    """vLLM's option names. ``method`` None picks ``lilicorr`` for a LiLiCorr checkpoint, else ``dflash``."""

    method: str | None = None
    num_speculative_tokens: int | None = None  # default: block_size − 1
    draft_sample_method: str = "greedy"
    rejection_sample_method: str = "standard"
    prompt_lookup_max: int = 4  # ngram only (vLLM's names)
    prompt_lookup_min: int = 1


@dataclass
class SeqState:
    request: Request
    pending: int = -1
    anchor: torch.Tensor | None = None  # [Hm]


def build_proposer(method: str, draft: DraftModel | None, target: TargetRuntime, config: SpecConfig) -> Proposer:
    draft_sample_method = config.draft_sample_method
    if method == "ar":
        return AutoregressiveProposer(draft_sample_method)
    if method == "ngram":
        from lilicorr.decoding.ngram import NgramProposer

        return NgramProposer(config.num_speculative_tokens or 4, config.prompt_lookup_max, config.prompt_lookup_min)
    if draft is None:
        raise ValueError(f"method {method!r} needs a draft checkpoint")
    if method == "dflash":
        return DFlashProposer(draft_sample_method)
    if method == "lilicorr":
        if draft.lilicorr is None:
            raise ValueError("method 'lilicorr' needs a LiLiCorrDraftModel checkpoint (this one is DFlashDraftModel)")
        return LiLiCorrProposer(draft.lilicorr, target.embed_tokens, draft_sample_method)
    raise ValueError(f"unknown method {method!r}: expected ar, ngram, dflash or lilicorr")


class SpecEngine:
    def __init__(
        self,
        target: TargetRuntime,
        draft: DraftModel | None = None,
        config: SpecConfig | None = None,
        proposer: Proposer | None = None,
    ):
        config = config or SpecConfig()
        if config.rejection_sample_method not in REJECTION_METHODS:
            raise ValueError(
                f"rejection_sample_method {config.rejection_sample_method!r}: expected one of {REJECTION_METHODS}"
            )
        method = config.method or ("ar" if draft is None else "lilicorr" if draft.is_lilicorr else "dflash")
        self.target, self.draft, self.config = target, draft, config
        self.proposer = proposer or build_proposer(method, draft, target, config)
        self.method = self.proposer.name
        if self.proposer.needs_draft:
            assert draft is not None
            target.set_layer_ids(tuple(draft.cfg.target_layer_ids))
            n = config.num_speculative_tokens or draft.cfg.block_size - 1
            check_num_speculative_tokens(draft.cfg, n)
            self.n = n
        else:  # a model-free proposer (ar: 0 tokens; ngram: its own count)
            self.n = int(getattr(self.proposer, "n", 0))
        self.decode = target.tokenizer.decode
        self.timer = StageTimer()
        self.stats = SpecStats()
        self.seqs: list[SeqState] = []
        self.tstate: CacheState | None = None
        self.dcache: DraftContextCache | None = None

    # -- batch membership ---------------------------------------------------------------------------
    @torch.no_grad()
    def add(self, requests: list[Request]) -> list[SeqState]:
        """Prefill new requests and join them to the running batch; returns their states.

        The first token each emits is the target's own sample after the prompt.
        """
        if not requests:
            return []
        with self.timer.stage("target_verify"):
            state = self.target.new_state(len(requests))
            ids, mask = pad_right([r.prompt_ids for r in requests], pad=0)
            out = self.target.forward(state, ids, mask, want_taps=self.proposer.needs_draft)
        with self.timer.stage("other"):
            last = mask.sum(1) - 1
            seqs = [SeqState(request=r) for r in requests]
            for i, s in enumerate(seqs):
                tok = choose_token(out.logits[i, last[i]], s.request.params, s.request.generator)
                s.request.commit([tok], self.decode, out.logits[i, last[i] : last[i] + 1])
                s.pending = tok
        dcache = None
        if self.proposer.needs_draft:
            with self.timer.stage("draft_backbone"):
                dcache, ctx = self._draft_context(out.taps, state.lengths.new_zeros(len(requests)), mask)
                for i, s in enumerate(seqs):
                    s.anchor = ctx[i, last[i]]
        if self.tstate is None:
            self.tstate, self.dcache, self.seqs = state, dcache, seqs
        else:
            self.tstate = self.target.concat_states(self.tstate, state)
            if dcache is not None:
                self.dcache = DraftContextCache.concat(self.dcache, dcache)
            self.seqs = self.seqs + seqs
        self._drop_finished()
        return seqs

    def _draft_context(self, taps: torch.Tensor, start: torch.Tensor, valid: torch.Tensor):
        """Fuse taps of rows ``[batch, n]`` at positions ``start + i`` into a new draft cache chunk."""
        assert self.draft is not None
        dtype = next(self.draft.parameters()).dtype
        ctx = self.draft.fuse(taps.to(dtype))  # [batch, n, Hm]
        pos = start[:, None] + torch.arange(taps.shape[1])[None]
        kv = self.draft.context_kv(ctx, pos)
        cfg = self.draft.cfg
        cache = DraftContextCache.empty(
            taps.shape[0], cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, dtype
        )
        cache.append(kv, valid)
        return cache, ctx

    def cancel(self, request: Request) -> None:
        """Remove a request now (client gone); its cache rows are freed at once."""
        keep = [i for i, s in enumerate(self.seqs) if s.request is not request]
        self._keep_rows(keep)

    def _keep_rows(self, keep: list[int]) -> None:
        if len(keep) == len(self.seqs):
            return
        if not keep:
            self.seqs, self.tstate, self.dcache = [], None, None
            return
        rows = torch.tensor(keep)
        self.target.select_rows(self.tstate, rows)
        if self.dcache is not None:
            self.dcache.select_rows(rows)
        self.seqs = [self.seqs[i] for i in keep]

    def _drop_finished(self) -> None:
        self._keep_rows([i for i, s in enumerate(self.seqs) if not s.request.finished])

    # -- one cycle -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[tuple[Request, list[int]]]:
        """One draft–verify cycle for every running request; returns (request, newly committed tokens)."""
        if not self.seqs:
            return []
        assert self.tstate is not None
        b, n = len(self.seqs), self.n
        drafted = n > 0 and self.proposer.needs_draft  # a drafter model runs: it needs taps and its context
        start = self.tstate.lengths.clone()  # [batch]: position of each pending token
        pending = torch.tensor([s.pending for s in self.seqs])
        temps = torch.tensor([s.request.params.temperature for s in self.seqs])
        proposal = None
        if n:
            proposal = self._propose(pending, start, temps)
        with self.timer.stage("target_verify"):
            verify_ids = pending[:, None] if proposal is None else torch.cat([pending[:, None], proposal.tokens], 1)
            out = self.target.forward(self.tstate, verify_ids, want_taps=drafted)
        with self.timer.stage("other"):
            verdicts = [self._verify(i, out.logits[i], proposal) for i in range(b)]
            accepted = torch.tensor([v[0] for v in verdicts])
            self.target.truncate(self.tstate, start + 1 + accepted)
        if drafted:
            with self.timer.stage("draft_backbone"):
                new_valid = torch.arange(n + 1)[None] <= accepted[:, None]
                chunk, ctx = self._draft_context(out.taps, start, new_valid)
                self.dcache.append(chunk.kv, new_valid)
        emitted = []
        with self.timer.stage("other"):
            for i, s in enumerate(self.seqs):
                a, tokens = verdicts[i]
                if n:
                    s.request.stats.record(n, a)
                    self.stats.record(n, a)
                if drafted:
                    s.anchor = ctx[i, a]
                before = len(s.request.output_ids)
                s.request.commit(tokens, self.decode, out.logits[i, : len(tokens)])  # token j ← logits row j
                emitted.append((s.request, s.request.output_ids[before:]))
                s.pending = tokens[-1]
            self._drop_finished()
        return emitted

    def _propose(self, pending: torch.Tensor, start: torch.Tensor, temps: torch.Tensor):
        if self.proposer.needs_draft:
            d = self._draft(pending, start)
        else:  # history-based proposers read only the requests and their pending tokens
            empty = torch.empty(0)
            d = DraftOutput(empty, empty, empty, empty, requests=[s.request for s in self.seqs], anchor_tokens=pending)
        n = self.n
        with self.timer.stage("other"):
            if self.config.draft_sample_method == "probabilistic" and bool((temps > 0).any()):
                uniforms = torch.stack([torch.rand(n, generator=s.request.generator) for s in self.seqs])
            else:
                uniforms = torch.zeros(len(pending), n)
        return self.proposer.propose(d, temps, uniforms, self.timer)

    def _draft(self, pending: torch.Tensor, start: torch.Tensor) -> DraftOutput:
        """One drafter pass over ``[pending, MASK × n]`` per row: hidden states and logits of the mask slots."""
        assert self.draft is not None and self.dcache is not None
        n = self.n
        with self.timer.stage("draft_backbone"):
            mask_id = self.draft.cfg.mask_token_id
            block = torch.cat([pending[:, None], torch.full((len(pending), n), mask_id)], 1)  # [batch, n+1]
            dtype = next(self.draft.parameters()).dtype
            emb = self.target.embed_tokens(block).to(dtype)
            pos = start[:, None] + torch.arange(n + 1)[None]
            hidden = self.draft.draft_block(emb, pos, self.dcache.kv, self.dcache.valid)[:, 1:]  # [batch, n, Hm]
            head = self.draft.lm_head if self.draft.lm_head is not None else self.target.lm_head
            logits = head(hidden.to(head.weight.dtype)).float()  # [batch, n, V]
            anchor = torch.stack([s.anchor for s in self.seqs])
        return DraftOutput(
            hidden=hidden,
            logits=logits,
            anchor=anchor,
            anchor_valid=torch.ones(len(pending), dtype=torch.bool),
            requests=[s.request for s in self.seqs],
            anchor_tokens=pending,
        )

    def _verify(self, row: int, logits: torch.Tensor, proposal) -> tuple[int, list[int]]:
        """Verify one request's block; ``logits`` ``[n + 1, V]``."""
        req = self.seqs[row].request
        drafts = [] if proposal is None else proposal.tokens[row].tolist()
        if req.params.greedy:
            v = verify_greedy(drafts, logits.argmax(-1).tolist())
        elif not drafts:
            return 0, [choose_token(logits[0], req.params, req.generator)]
        else:
            p = target_probs(logits, req.params)  # [n + 1, V]
            q = proposal.q_dense(row, logits.shape[-1])
            verify = verify_block if self.config.rejection_sample_method == "block" else verify_standard
            v = verify(drafts, p, q, req.generator)
        return v.accepted, v.tokens

    # -- convenience ------------------------------------------------------------------------------
    def generate(self, requests: list[Request], on_tokens=None) -> list[Request]:
        """Run a static batch to completion; ``on_tokens(request, new_tokens)`` streams output."""
        for s in self.add(requests):
            if on_tokens is not None:
                on_tokens(s.request, list(s.request.output_ids))
        while self.seqs:
            for req, toks in self.step():
                if on_tokens is not None and toks:
                    on_tokens(req, toks)
        return requests
