"""The speculative decoding engine: prefill → draft block → propose → verify → commit, batched.

One loop for everything (generate, bench, serve). Requests join (``add``) and leave between steps,
each row with its own length, acceptance and sampling settings. Invariants per running request:

- the target cache holds every committed token except the newest one (``pending``), which has
  been emitted but not yet run through the target;
- the drafter's context cache (``draft_side.py``) holds the fused target features of exactly those
  positions (the pending token has no features yet), except for the taps that plain steps defer;
- ``anchor`` is the fused feature row of the last accepted position, which the LiLiCorr head uses
  for its start scores (stale while taps are deferred, set again when they are fused).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from lilicorr.decoding.adaptive import AdaptiveWidth, CostModel, DraftGate
from lilicorr.decoding.config import SpecConfig, draft_length
from lilicorr.decoding.draft_side import DraftSide
from lilicorr.decoding.policy import LoadPolicy, RowAcceptance, verify_rows, widen
from lilicorr.decoding.prefill import prefill_groups
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import choose_token
from lilicorr.decoding.stats import SpecStats, StageTimer
from lilicorr.decoding.verify import Verdict, Verifier
from lilicorr.models.draft import DraftModel
from lilicorr.runtime.cache import CacheState, leave_order, pad_right
from lilicorr.runtime.runtime import TargetRuntime


@dataclass
class SeqState:
    request: Request
    pending: int = -1
    anchor: torch.Tensor | None = None  # [Hm]
    recent: RowAcceptance = field(default_factory=RowAcceptance)  # the load policy's view of this row


class SpecEngine:
    def __init__(
        self,
        target: TargetRuntime,
        draft: DraftModel | None = None,
        config: SpecConfig | None = None,
        *,
        proposer: Proposer,
        verifier: Verifier | None = None,
        draft_vocab: torch.Tensor | None = None,
    ):
        """Built by ``decoding.build.build_engine``, which gets the proposer from the methods registry;
        ``draft_vocab`` ``[V']``: the token ids the drafter drafts from (None: all)."""
        config = config or SpecConfig()
        self.verifier = verifier or Verifier(config.rejection_sample_method)
        self.target, self.draft, self.config = target, draft, config
        self.proposer = proposer
        self.method = self.proposer.name
        if self.proposer.needs_draft:
            assert draft is not None
            target.set_layer_ids(tuple(draft.cfg.target_layer_ids))
            self.n = draft_length(config, draft.cfg.block_size)
        else:  # a model-free proposer (ar: 0 tokens; ngram: its own count)
            self.n = self.proposer.n
        self.adaptive: AdaptiveWidth | None = None
        self.gate: DraftGate | None = None  # adaptive / draft_gate: whether a step runs the drafter (measured)
        self._draft_cost: float | None = None  # adaptive: seconds the drafter takes per step (running mean)
        self.policy: LoadPolicy | None = None  # serving: each step's width and drafting rows (use_load_policy)
        width, tree = self.proposer.verify_width(self.n)
        if self.proposer.needs_draft and self.n and (config.enable_adaptive_verification or self.proposer.adapts_width):
            self.adaptive = AdaptiveWidth(width, CostModel.measure(target, width + 1), tree=tree)
        if self.proposer.needs_draft and self.n and (self.adaptive is not None or config.draft_gate):
            self.gate = DraftGate()  # alone (draft_gate): full proposals, or plain steps while drafting loses
        self.drafter = (
            DraftSide(draft, target, draft_vocab) if draft is not None and self.proposer.needs_draft else None
        )
        self.decode = target.tokenizer.decode
        self.timer = StageTimer()
        self.stats = SpecStats()
        self.seqs: list[SeqState] = []
        self.tstate: CacheState | None = None

    def use_load_policy(self, batches: tuple[int, ...] = (1, 4, 16)) -> LoadPolicy | None:
        """Let the load policy (``policy.py``) decide every step's width and drafting rows from measured
        costs; it replaces the draft gate and the width rule, which decide for the whole batch only."""
        if not self.n:
            return None
        width, tree = self.proposer.verify_width(self.n)
        cost = (
            self.adaptive.cost
            if self.adaptive is not None
            else CostModel.measure(self.target, width + 1, batches, reps=3)
        )
        self.policy = LoadPolicy(width, cost, tree=tree)
        self.gate, self.adaptive = None, None
        return self.policy

    @property
    def speculative(self) -> bool:
        """True when the method drafts tokens (everything but plain decoding)."""
        return self.n > 0

    # -- batch membership ---------------------------------------------------------------------------
    @torch.no_grad()
    def add(self, requests: list[Request]) -> list[SeqState]:
        """Prefill new requests and join them to the running batch; returns their states (in prefill order).

        The first token each emits is the target's own sample after the prompt. Prompts of very different
        lengths are prefilled in separate forwards (``prefill_groups``), so a long one does not pad the rest.
        """
        idle = not self.seqs
        seqs: list[SeqState] = []
        for group in prefill_groups([len(r.prompt_ids) for r in requests]):
            seqs += self._prefill([requests[i] for i in group])
        if self.gate is not None and requests and idle:
            # new prompts on an idle engine (one request after another, as generate and bench run): the drafter's
            # chances on them are probed at once. Joining a running batch ends no pause: under load a probe is a
            # wide verify pass, and requests join often.
            self.gate.new_text()
        return seqs

    def _prefill(self, requests: list[Request]) -> list[SeqState]:
        """One prefill forward over ``requests`` (right-padded to the longest), joined to the running batch."""
        with self.timer.stage("target_verify"):
            state = self.target.new_state(len(requests))
            ids, mask = pad_right([r.prompt_ids for r in requests], pad=0)
            last = mask.sum(1) - 1  # [batch] each row's last prompt position: its logits are the only ones used
            keep = torch.unique(last)  # sorted
            out = self.target.forward(state, ids, mask, want_taps=self.proposer.needs_draft, logits_at=keep)
        with self.timer.stage("other"):
            col = torch.searchsorted(keep, last)  # [batch] each row's last position among the kept logits
            seqs = [SeqState(request=r, recent=RowAcceptance(sampled=r.params.temperature > 0)) for r in requests]
            for i, s in enumerate(seqs):
                tok = choose_token(out.logits[i, col[i]], s.request.params, s.request.generator)
                s.request.commit([tok], self.decode, out.logits[i, col[i] : col[i] + 1])
                s.pending = tok
        if self.drafter is not None:
            with self.timer.stage("draft_backbone"):
                chunk, ctx = self.drafter.context(out.taps, state.lengths.new_zeros(len(requests)), mask)
                for i, s in enumerate(seqs):
                    s.anchor = ctx[i, last[i]]
                self._set_anchors(self.drafter.join(chunk))  # the running rows' deferred taps are fused first
        if self.tstate is None:
            self.tstate, self.seqs = state, seqs
        else:
            self.tstate = self.target.concat_states(self.tstate, state)
            self.seqs = self.seqs + seqs
        self._drop_finished()
        return seqs

    def cancel(self, request: Request) -> None:
        """Remove a request now (client gone); its cache rows are freed at once."""
        keep = [i for i, s in enumerate(self.seqs) if s.request is not request]
        self._keep_rows(keep)

    def _keep_rows(self, keep: list[int]) -> None:
        if len(keep) == len(self.seqs):
            return
        if not keep:
            self.seqs, self.tstate = [], None
            if self.drafter is not None:
                self.drafter.clear()
            return
        order = leave_order(keep)  # the kept rows, the tail's moved into freed slots
        rows = torch.tensor(order)
        self.target.select_rows(self.tstate, rows)
        if self.drafter is not None:
            self.drafter.select_rows(rows)
        self.seqs = [self.seqs[i] for i in order]

    def _drop_finished(self) -> None:
        self._keep_rows([i for i, s in enumerate(self.seqs) if not s.request.finished])

    def _set_anchors(self, anchors: torch.Tensor | None) -> None:
        """Refresh the running rows' anchors after deferred taps were fused (``anchors`` ``[batch, Hm]``)."""
        if anchors is not None:
            for s, anchor in zip(self.seqs, anchors, strict=True):
                s.anchor = anchor

    # -- one cycle -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[tuple[Request, list[int]]]:
        """One draft–verify cycle for every running request; returns (request, newly committed tokens).

        The proposal is a chain or a tree; the engine verifies either without knowing the method."""
        if not self.seqs:
            return []
        assert self.tstate is not None
        n = self.n
        drafted = n > 0 and self.drafter is not None  # a drafter model is in use: it needs taps and its context
        start = self.tstate.lengths.clone()  # [batch]: position of each pending token
        pending = torch.tensor([s.pending for s in self.seqs])
        temps = torch.tensor([s.request.params.temperature for s in self.seqs])
        t_draft = time.perf_counter()
        plan = self.policy.plan([s.recent for s in self.seqs]) if self.policy is not None and n else None
        gate_says = plan is None and (self.gate is None or self.gate.should_draft())
        drafting = bool(n) and (plan.width > 0 if plan is not None else gate_says)
        deferred_s, deferred_taps = time.perf_counter(), 0
        if drafting and drafted:
            deferred_taps = self.drafter.waiting_taps
            with self.timer.stage("draft_backbone"):
                self._set_anchors(self.drafter.fuse_deferred())
        deferred_s = time.perf_counter() - deferred_s  # the paused steps' work, done now (DraftGate.record)
        rows = None if plan is None or len(plan.rows) == len(self.seqs) else plan.rows  # None: every row
        proposal = self._propose(pending, start, temps, rows) if drafting else None
        conf, width = None, None
        if plan is not None and proposal is not None:
            width = plan.width
            self.stats.num_proposed_tokens += proposal.tokens.numel()
            proposal = proposal if width == proposal.tokens.shape[1] else proposal.prefix(width)
        elif self.adaptive is not None and proposal is not None:
            with self.timer.stage("other"):
                spent = time.perf_counter() - t_draft  # this step's drafting time, running mean over steps
                self._draft_cost = spent if self._draft_cost is None else 0.8 * self._draft_cost + 0.2 * spent
                conf = proposal.confidence
                width = self.adaptive.choose(conf, self._draft_cost)
                self.stats.num_proposed_tokens += proposal.tokens.numel()
                proposal = self._verified_part(proposal, width)
        full = proposal if rows is None or proposal is None else widen(proposal, rows, pending)  # [batch, W]
        t_verify = time.perf_counter()
        with self.timer.stage("target_verify"):
            out = self._verify_forward(pending, full, drafted)
        t_verify = time.perf_counter() - t_verify
        with self.timer.stage("other"):
            verdicts = verify_rows(self.verifier, proposal, rows, out.logits, [s.request for s in self.seqs])
            self._keep_verified(start, full, verdicts)
            if conf is not None:
                self.adaptive.update(conf, [v.path for v in verdicts], width)
        ctx = None
        if drafted and not drafting:  # a paused step: one token per row, fused later
            with self.timer.stage("draft_backbone"):
                self._set_anchors(self.drafter.defer(out.taps, start))
        elif drafted:
            with self.timer.stage("draft_backbone"):
                ctx = self.drafter.extend(out.taps, start, verdicts)
        emitted = []
        with self.timer.stage("other"):
            drafted_rows = set(range(len(self.seqs)) if rows is None else rows) if proposal is not None else set()
            for i, s in enumerate(self.seqs):
                v = verdicts[i]
                if i in drafted_rows:
                    s.request.stats.record(proposal.tokens.shape[1], v.accepted)
                    self.stats.record(proposal.tokens.shape[1], v.accepted)
                if ctx is not None:
                    s.anchor = ctx[i, v.accepted]
                before = len(s.request.output_ids)
                s.request.commit(v.tokens, self.decode, out.logits[i, v.path])  # token j ← verify position path[j]
                emitted.append((s.request, s.request.output_ids[before:]))
                s.pending = v.tokens[-1]
            if plan is not None:
                self.stats.num_paused_steps += not drafting
                paths = [verdicts[i].path for i in sorted(drafted_rows)]
                seconds = time.perf_counter() - t_draft
                self.policy.record(
                    plan, [s.recent for s in self.seqs], paths, seconds, t_verify, deferred_s, deferred_taps
                )
            if self.gate is not None:
                self.stats.num_paused_steps += not drafting
                tokens = sum(len(v.tokens) for v in verdicts)
                seconds = time.perf_counter() - t_draft
                chose_none = drafting and width == 0
                self.gate.record(drafting, seconds, tokens, chose_none, len(verdicts), deferred_s, deferred_taps)
            self._drop_finished()
        return emitted

    @staticmethod
    def _verified_part(proposal: Proposal, width: int) -> Proposal | None:
        """The prefix of the chain or best-first tree that adaptive verification sends (None: an AR step)."""
        if width == 0:
            return None
        return proposal if width == proposal.tokens.shape[1] else proposal.prefix(width)

    def _verify_forward(self, pending: torch.Tensor, proposal: Proposal | None, drafted: bool):
        """One target pass over ``[pending, drafts…]``: causal for a chain, ancestor-masked for a tree."""
        assert self.tstate is not None
        if proposal is None:
            return self.target.forward(self.tstate, pending[:, None], want_taps=drafted)
        ids = torch.cat([pending[:, None], proposal.tokens], 1)  # [batch, N + 1]
        if proposal.is_tree:
            return self.target.forward_tree(self.tstate, ids, proposal.depth(), proposal.ancestors(), want_taps=drafted)
        return self.target.forward(self.tstate, ids, want_taps=drafted)

    def _keep_verified(self, start: torch.Tensor, proposal: Proposal | None, verdicts: list[Verdict]) -> None:
        """Drop the rejected drafts from the target cache (a chain keeps a prefix, a tree one path)."""
        assert self.tstate is not None
        if proposal is not None and proposal.is_tree:
            keep = torch.zeros(len(verdicts), proposal.tokens.shape[1] + 1, dtype=torch.bool)
            for row, v in enumerate(verdicts):
                keep[row, v.path] = True
            self.target.keep_new(self.tstate, keep)
        else:
            accepted = torch.tensor([v.accepted for v in verdicts])
            self.target.truncate(self.tstate, start + 1 + accepted)

    def _propose(self, pending: torch.Tensor, start: torch.Tensor, temps: torch.Tensor, rows: list[int] | None = None):
        """The proposal of every row, or of ``rows`` only (the load policy paused the others)."""
        seqs = self.seqs if rows is None else [self.seqs[i] for i in rows]
        if rows is not None:
            pending, start, temps = pending[rows], start[rows], temps[rows]
        if self.drafter is not None:
            with self.timer.stage("draft_backbone"):
                d = self.drafter.block(pending, start, self.n, torch.stack([s.anchor for s in seqs]), rows)
                d.requests = [s.request for s in seqs]
        else:  # history-based proposers read only the requests and their pending tokens
            empty = torch.empty(0)
            d = DraftOutput(empty, empty, empty, empty, requests=[s.request for s in seqs], anchor_tokens=pending)
        n = self.n
        with self.timer.stage("other"):
            if self.config.draft_sample_method == "probabilistic" and bool((temps > 0).any()):
                uniforms = torch.stack([torch.rand(n, generator=s.request.generator) for s in seqs])
            else:
                uniforms = torch.zeros(len(pending), n)
        proposal = self.proposer.propose(d, temps, uniforms, self.timer)
        if self.adaptive is not None and not proposal.is_tree:  # a chain: the drafter's probability of each token
            with self.timer.stage("other"):
                logits = d.logits.float()  # [batch, n, V]
                chosen = logits.gather(-1, proposal.tokens[..., None]).squeeze(-1)
                proposal.confidence = (chosen - logits.logsumexp(-1)).exp()  # [batch, n]
        return proposal

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
