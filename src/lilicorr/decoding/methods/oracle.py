"""``oracle`` (measurement only): at each slot the target's own next token whenever it is among the K
lattice candidates — the upper bound of any walk over this lattice. Needs each request's reference
continuation (the target's greedy output, ``extras["references"]``: request id(…) → tokens), so it
is defined for T = 0."""

from __future__ import annotations

import torch

from lilicorr.decoding.methods.base import BuildContext, Method, register
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.stats import StageTimer
from lilicorr.models.head import candidates


class OracleLatticeProposer(Proposer):
    name = "oracle"

    def __init__(self, k: int, references: dict[int, list[int]]):
        super().__init__("greedy")
        self.k, self.references = k, references

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
            return self.one_hot_chain(ids.gather(-1, picks[..., None]).squeeze(-1))


@register
class Oracle(Method):
    name = "oracle"
    needs_reference = True
    help = "measurement only: the truth whenever it is in the top-K lattice (T = 0)"

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        assert ctx.draft is not None
        k = ctx.draft.cfg.lilicorr.candidate_topk if ctx.draft.lilicorr is not None else 8
        return OracleLatticeProposer(k, ctx.extras.get("references", {}))
