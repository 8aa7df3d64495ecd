"""``lilicorr``: top-K lattice → the head's pair scores → greedy or probabilistic walk; q over the K
candidates of each slot (the realised walk distribution)."""

from __future__ import annotations

import torch

from lilicorr.decoding.methods.base import BuildContext, Method, register
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.stats import StageTimer
from lilicorr.decoding.walk import walk_greedy, walk_probabilistic
from lilicorr.models.head import HeadScores, LiLiCorrHead, candidates
from lilicorr.runtime.threads import step_threads


class LiLiCorrProposer(Proposer):
    name = "lilicorr"

    def __init__(self, head: LiLiCorrHead, embed: torch.nn.Embedding, draft_sample_method: str = "greedy"):
        super().__init__(draft_sample_method)
        self.head, self.embed = head, embed

    def lattice(self, d: DraftOutput, timer: StageTimer) -> tuple[torch.Tensor, torch.Tensor, HeadScores]:
        """Candidate ids ``[batch, n, K]``, their drafter log-probs ``[batch, n, K]`` and the head's
        start / pair scores over them."""
        with timer.stage("candidates"):
            ids, lp = candidates(d.logits, self.head.k)  # [batch, n, K]
            emb = self.embed(ids).to(d.hidden.dtype)  # [batch, n, K, Hm]
        # the head's pass: small operators, on one thread for 1–2 rows as a small target pass (runtime/threads.py;
        # SmolLM2's conv head, batch 1, two runs: 4.7–4.9 → 3.3–3.4 ms a drafting step)
        with timer.stage("head"), step_threads(ids.shape[0], 1):
            scores = self.head(d.hidden, emb, lp, d.anchor, d.anchor_valid)
        return ids, lp, scores

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        ids, _, scores = self.lattice(d, timer)
        with timer.stage("walk"):
            if self.draft_sample_method == "greedy":
                picks = walk_greedy(scores)
                return self.one_hot_chain(ids.gather(-1, picks[..., None]).squeeze(-1))
            picks, q = walk_probabilistic(scores, temperature, uniforms)
            return Proposal(tokens=ids.gather(-1, picks[..., None]).squeeze(-1), q_ids=ids, q_probs=q)


def lilicorr_head(ctx: BuildContext) -> LiLiCorrHead:
    """The checkpoint's head, or a named error for a DFlash-only checkpoint."""
    if ctx.draft is None or ctx.draft.lilicorr is None:
        raise ValueError("this method needs a LiLiCorrDraftModel checkpoint (this one is DFlashDraftModel)")
    return ctx.draft.lilicorr


@register
class LiLiCorr(Method):
    name = "lilicorr"
    help = "DFlash block + LiLiCorr head: the best-scoring path through the top-K lattice"

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        return LiLiCorrProposer(lilicorr_head(ctx), ctx.target.embed_tokens, ctx.draft_sample_method)
