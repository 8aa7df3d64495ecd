"""Proposal methods behind one small interface, so comparison arms plug into the engine unchanged.

A proposer turns one drafted block (draft hidden states and logits at the mask slots, plus the
anchor features) into draft tokens and the distribution ``q`` they were drawn from. The engine
verifies against ``q``, so any proposer is lossless as long as ``q`` is the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lilicorr.decoding.sampling import inverse_cdf
from lilicorr.decoding.stats import StageTimer
from lilicorr.decoding.walk import walk_greedy, walk_probabilistic
from lilicorr.models.head import LiLiCorrHead, candidates

DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")


@dataclass
class DraftOutput:
    hidden: torch.Tensor  # [batch, n, Hm] draft output after norm, mask slots 1..n
    logits: torch.Tensor  # [batch, n, V] fp32 draft logits through the LM head
    anchor: torch.Tensor  # [batch, Hm] fused target features of the last accepted position
    anchor_valid: torch.Tensor  # [batch] bool
    requests: list | None = None  # the requests of each row (history-based proposers read them)
    anchor_tokens: torch.Tensor | None = None  # [batch] the pending token each block starts from


@dataclass
class Proposal:
    tokens: torch.Tensor  # [batch, n] long
    q_ids: torch.Tensor | None  # [batch, n, S] support of q, or None: q_probs covers the whole vocabulary
    q_probs: torch.Tensor  # [batch, n, S] (or [batch, n, V]) fp32

    def q_dense(self, row: int, vocab: int) -> torch.Tensor:
        """q of one request as ``[n, V]``."""
        if self.q_ids is None:
            return self.q_probs[row]
        n = self.tokens.shape[1]
        return torch.zeros(n, vocab).scatter_(1, self.q_ids[row], self.q_probs[row])


class Proposer:
    """Interface: ``propose`` returns tokens and q for a batch of drafted blocks."""

    name = "base"
    needs_draft = True

    def __init__(self, draft_sample_method: str = "greedy"):
        if draft_sample_method not in DRAFT_SAMPLE_METHODS:
            raise ValueError(f"draft_sample_method {draft_sample_method!r}: expected one of {DRAFT_SAMPLE_METHODS}")
        self.draft_sample_method = draft_sample_method

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        raise NotImplementedError


class AutoregressiveProposer(Proposer):
    """No draft: every cycle is one target forward of the pending token."""

    name = "ar"
    needs_draft = False


class DFlashProposer(Proposer):
    """Vanilla DFlash: per-slot argmax, or (probabilistic, T > 0) a sample of the slot marginal."""

    name = "dflash"

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("walk"):
            arg = d.logits.argmax(-1)  # [batch, n]
            sampled = temperature > 0
            if self.draft_sample_method == "greedy" or not bool(sampled.any()):
                return Proposal(tokens=arg, q_ids=arg[..., None], q_probs=torch.ones(*arg.shape, 1))
            t = torch.where(sampled, temperature, torch.ones_like(temperature))[:, None, None]
            probs = torch.softmax(d.logits / t, dim=-1)  # [batch, n, V]
            probs = torch.where(sampled[:, None, None], probs, F.one_hot(arg, probs.shape[-1]).to(probs.dtype))
            return Proposal(tokens=inverse_cdf(probs, uniforms), q_ids=None, q_probs=probs)


class LiLiCorrProposer(Proposer):
    """Top-K lattice → head scores → greedy or probabilistic walk; q over the K candidates."""

    name = "lilicorr"

    def __init__(self, head: LiLiCorrHead, embed: torch.nn.Embedding, draft_sample_method: str = "greedy"):
        super().__init__(draft_sample_method)
        self.head, self.embed = head, embed

    def lattice(self, d: DraftOutput, timer: StageTimer):
        with timer.stage("candidates"):
            ids, lp = candidates(d.logits, self.head.k)  # [batch, n, K]
            emb = self.embed(ids).to(d.hidden.dtype)  # [batch, n, K, Hm]
        with timer.stage("head"):
            scores = self.head(d.hidden, emb, lp, d.anchor, d.anchor_valid)
        return ids, scores

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        ids, scores = self.lattice(d, timer)
        with timer.stage("walk"):
            if self.draft_sample_method == "greedy":
                picks = walk_greedy(scores)
                q = torch.ones(*picks.shape, 1)
                return Proposal(
                    tokens=ids.gather(-1, picks[..., None]).squeeze(-1),
                    q_ids=ids.gather(-1, picks[..., None]),
                    q_probs=q,
                )
            picks, q = walk_probabilistic(scores, temperature, uniforms)
            return Proposal(tokens=ids.gather(-1, picks[..., None]).squeeze(-1), q_ids=ids, q_probs=q)


class OracleLatticeProposer(LiLiCorrProposer):
    """Measurement only: at each slot pick the target's own next token whenever it is among the K
    candidates (the upper bound of any walk over this lattice). Needs each request's reference
    continuation (the target's greedy output), so it is defined for T = 0."""

    name = "oracle"

    def __init__(self, head: LiLiCorrHead | None, k: int, embed: torch.nn.Embedding, references: dict[int, list[int]]):
        Proposer.__init__(self, "greedy")
        self.head, self.embed, self.k, self.references = head, embed, k, references

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("candidates"):
            ids, _ = candidates(d.logits, self.k)  # [batch, n, K]
        with timer.stage("walk"):
            n = ids.shape[1]
            truth = torch.full(ids.shape[:2], -1, dtype=torch.long)
            for row, req in enumerate(d.requests or []):
                ref = self.references.get(id(req), [])
                done = len(req.output_ids)
                for s in range(n):
                    if done + s < len(ref):
                        truth[row, s] = ref[done + s]
            hit = ids == truth[..., None]
            picks = torch.where(hit.any(-1), hit.float().argmax(-1), torch.zeros_like(truth))
            tokens = ids.gather(-1, picks[..., None]).squeeze(-1)
            return Proposal(tokens=tokens, q_ids=tokens[..., None], q_probs=torch.ones(*tokens.shape, 1))


class ArmProposer(Proposer):
    """Comparison arms (DFlash2 selector, DSpark Markov head, Domino GRU): a sequential walk where
    each slot's distribution depends on the token chosen at the previous slot (the anchor token for
    slot 0). At T > 0 with probabilistic drafting each slot is sampled and its distribution is q."""

    def __init__(self, arm: torch.nn.Module, embed: torch.nn.Embedding, draft_sample_method: str = "greedy"):
        super().__init__(draft_sample_method)
        self.arm, self.embed, self.name = arm, embed, arm.kind

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        from lilicorr.models.arms import DFlash2Selector, DominoGRU

        b, n, _ = d.logits.shape
        sampled = (temperature > 0) & (self.draft_sample_method == "probabilistic")
        t = torch.where(sampled, temperature, torch.ones_like(temperature))[:, None]
        prev = d.anchor_tokens
        state = None
        toks, supports, qs = [], [], []
        with timer.stage("head"):
            for s in range(n):
                if isinstance(self.arm, DFlash2Selector):
                    unary, cand = torch.topk(d.logits[:, s], self.arm.k, dim=-1)  # [b, K]
                    row = self.arm.scores(d.hidden[:, s], cand, unary, prev)
                else:
                    cand = None
                    extra = self.embed(prev).to(d.hidden.dtype) if isinstance(self.arm, DominoGRU) else prev
                    row, state = self.arm.logits(d.hidden[:, s], d.logits[:, s], extra, state)
                row = row.float()
                q = torch.softmax(row / t, -1)
                pick_s = inverse_cdf(q, uniforms[:, s])
                arg = row.argmax(-1)
                idx = torch.where(sampled, pick_s, arg)
                q = torch.where(sampled[:, None], q, F.one_hot(arg, q.shape[-1]).to(q.dtype))
                tok = cand.gather(-1, idx[:, None]).squeeze(-1) if cand is not None else idx
                toks.append(tok)
                supports.append(cand)
                qs.append(q)
                prev = tok
        tokens = torch.stack(toks, 1)
        if supports[0] is not None:
            return Proposal(tokens=tokens, q_ids=torch.stack(supports, 1), q_probs=torch.stack(qs, 1))
        return Proposal(tokens=tokens, q_ids=None, q_probs=torch.stack(qs, 1))
