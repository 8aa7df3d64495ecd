"""The comparison arms — ``dflash2`` (DFlash2's selector), ``dspark`` (Markov head), ``domino`` (GRU) —
behind one interface: a sequential walk where each slot's distribution depends on the token chosen at
the previous slot (the anchor token for slot 0). At T > 0 with probabilistic drafting each slot is
sampled and its distribution is q. An arm is saved beside its DFlash backbone (``arm.json``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lilicorr.decoding.methods.base import BuildContext, Method, register
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.sampling import inverse_cdf
from lilicorr.decoding.stats import StageTimer
from lilicorr.models.arms import ARM_KINDS, arm_kind, load_arm


class ArmProposer(Proposer):
    def __init__(self, arm: torch.nn.Module, embed: torch.nn.Embedding, draft_sample_method: str = "greedy"):
        super().__init__(draft_sample_method)
        self.arm, self.embed, self.name = arm, embed, arm.kind

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        n = d.logits.shape[1]
        sampled = (temperature > 0) & (self.draft_sample_method == "probabilistic")
        t = torch.where(sampled, temperature, torch.ones_like(temperature))[:, None]
        prev, state = d.anchor_tokens, None
        toks, supports, qs = [], [], []
        with timer.stage("head"):
            for s in range(n):
                row, cand, state = self.arm.slot_scores(d.hidden[:, s], d.logits[:, s], prev, state, self.embed)
                row = row.float()
                q = torch.softmax(row / t, -1)
                arg = row.argmax(-1)
                idx = torch.where(sampled, inverse_cdf(q, uniforms[:, s]), arg)
                q = torch.where(sampled[:, None], q, F.one_hot(arg, q.shape[-1]).to(q.dtype))
                tok = cand.gather(-1, idx[:, None]).squeeze(-1) if cand is not None else idx
                toks.append(tok)
                supports.append(cand)
                qs.append(q)
                prev = tok
        tokens = torch.stack(toks, 1)
        q_ids = torch.stack(supports, 1) if supports[0] is not None else None
        return Proposal(tokens=tokens, q_ids=q_ids, q_probs=torch.stack(qs, 1))


class Arm(Method):
    """A comparison arm read from the drafter folder's ``arm.json`` (it must be of this kind)."""

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        assert ctx.draft is not None
        arm = load_arm(ctx.draft_dir, next(ctx.draft.parameters()).dtype) if ctx.draft_dir else None
        if arm is None or arm.kind != cls.name:
            found = arm_kind(ctx.draft_dir) if ctx.draft_dir else None
            raise ValueError(
                f"method {cls.name!r}: {ctx.draft_dir} has no {cls.name} arm (arm.json: {found or 'missing'})"
            )
        return ArmProposer(arm, ctx.target.embed_tokens, ctx.draft_sample_method)


for _kind in ARM_KINDS:
    register(type(f"Arm_{_kind}", (Arm,), {"name": _kind, "help": f"comparison arm {_kind} on a DFlash backbone"}))
