"""``dflash``: vanilla DFlash — the per-slot argmax of the drafted block, or (probabilistic, T > 0) a
sample of each slot's marginal, which is then q."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lilicorr.decoding.methods.base import Method, register
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.sampling import inverse_cdf
from lilicorr.decoding.stats import StageTimer


class DFlashProposer(Proposer):
    name = "dflash"

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("walk"):
            arg = d.logits.argmax(-1)  # [batch, n]
            sampled = temperature > 0
            if self.draft_sample_method == "greedy" or not bool(sampled.any()):
                return self.one_hot_chain(arg)
            t = torch.where(sampled, temperature, torch.ones_like(temperature))[:, None, None]
            probs = torch.softmax(d.logits / t, dim=-1)  # [batch, n, V]
            probs = torch.where(sampled[:, None, None], probs, F.one_hot(arg, probs.shape[-1]).to(probs.dtype))
            return Proposal(tokens=inverse_cdf(probs, uniforms), q_ids=None, q_probs=probs)


@register
class DFlash(Method):
    name = "dflash"
    help = "block-diffusion drafter, per-slot argmax (or marginal sample)"
    proposer = DFlashProposer
