"""Tree methods: ``ddtree`` (training-free, best-first over DFlash's per-slot marginals; Ringel &
Romano, 2026) and ``lilicorr-tree`` (best-first over the K-candidate lattice with the head's
conditional pair scores). Both return a tree proposal; the engine verifies it in one target pass
with an ancestor-only mask and follows the target's own choices down it (lossless)."""

from __future__ import annotations

import torch

from lilicorr.decoding.methods import BuildContext, Method, Option, register
from lilicorr.decoding.methods.lilicorr import LiLiCorrProposer, lilicorr_head
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.stats import StageTimer
from lilicorr.decoding.tree import TokenTree, build_lattice_tree, build_tree
from lilicorr.models.head import LiLiCorrHead


def tree_proposal(tree: TokenTree) -> Proposal:
    """A ``TokenTree`` (node 0 = the pending token) as a tree proposal over the verify sequence."""
    return Proposal(tokens=tree.tokens[:, 1:], parents=tree.parents[:, 1:])


class TreeProposer(Proposer):
    """DDTree's tree: ``budget`` nodes (root included), ``topk`` candidates per slot."""

    name = "ddtree"

    def __init__(self, budget: int = 16, topk: int = 4):
        super().__init__("greedy")
        if budget < 2:
            raise ValueError(f"tree_budget must be >= 2 (the root and one draft), got {budget}")
        self.budget, self.topk = budget, topk

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("walk"):
            return tree_proposal(build_tree(d.logits, d.anchor_tokens, self.budget, self.topk))


class LatticeTreeProposer(TreeProposer):
    """LiLiCorr's tree: best-first over the lattice with the head's conditional scores."""

    name = "lilicorr-tree"

    def __init__(self, head: LiLiCorrHead, embed: torch.nn.Embedding, budget: int = 16):
        super().__init__(budget, head.k)
        self.lattice = LiLiCorrProposer(head, embed)

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        ids, scores = self.lattice.lattice(d, timer)
        with timer.stage("walk"):
            return tree_proposal(build_lattice_tree(ids, scores, d.anchor_tokens, self.budget))


BUDGET = Option("tree_budget", 16, "tree nodes verified per step, the pending token included")


@register
class DDTree(Method):
    name = "ddtree"
    per_draft_length = False
    help = "best-first tree over the drafter's per-slot marginals (training-free)"
    options = (BUDGET, Option("tree_topk", 4, "candidates per slot"))

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        return TreeProposer(ctx.options["tree_budget"], ctx.options["tree_topk"])


@register
class LiLiCorrTree(Method):
    name = "lilicorr-tree"
    per_draft_length = False
    help = "best-first tree over the LiLiCorr lattice with the head's conditional scores"
    options = (BUDGET,)

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        return LatticeTreeProposer(lilicorr_head(ctx), ctx.target.embed_tokens, ctx.options["tree_budget"])
