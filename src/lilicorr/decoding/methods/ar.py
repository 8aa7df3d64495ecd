"""``ar``: no draft — every cycle is one target forward of the pending token (the baseline)."""

from __future__ import annotations

from lilicorr.decoding.methods.base import BuildContext, Method, register
from lilicorr.decoding.proposal import Proposer


class AutoregressiveProposer(Proposer):
    name = "ar"
    needs_draft = False
    n = 0


@register
class Autoregressive(Method):
    name = "ar"
    baseline = True
    per_draft_length = False
    needs_draft = False
    help = "plain decoding, one target token per step"

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        return AutoregressiveProposer()
