"""Tree methods: ``ddtree`` (training-free, best-first over DFlash's per-slot marginals; Ringel &
Romano, 2026) and ``lilicorr-tree`` (best-first over the K-candidate lattice with the head's
conditional pair scores). Both return a tree proposal; the engine verifies it in one target pass
with an ancestor-only mask and follows the target's own choices down it (lossless)."""

from __future__ import annotations

import torch

from lilicorr.decoding.methods.base import AUTO, BuildContext, Method, Option, register
from lilicorr.decoding.methods.lilicorr import LiLiCorrProposer, lilicorr_head
from lilicorr.decoding.methods.ngram import lookup_request
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.stats import StageTimer
from lilicorr.decoding.tree import TokenTree, build_lattice_tree, build_tree
from lilicorr.models.head import LiLiCorrHead


def tree_proposal(tree: TokenTree) -> Proposal:
    """A ``TokenTree`` (node 0 = the pending token) as a tree proposal over the verify sequence; the
    confidence of a node is its path score as a probability (adaptive verification prunes by it)."""
    return Proposal(tokens=tree.tokens[:, 1:], parents=tree.parents[:, 1:], confidence=tree.score[:, 1:].exp())


# With ``tree_budget: auto`` a tree of this many nodes is built and the engine verifies, each step, the
# best-first prefix of it that maximises expected tokens per second under the measured cost curve
# (``decoding/adaptive.py``). It bounds the search and the verify width (what a wide verify costs on a
# CPU: benchmarks/verify_cost.py).
AUTO_TREE_CAP = 32


class TreeProposer(Proposer):
    """DDTree's tree: ``budget`` nodes (root included; ``auto``: up to ``AUTO_TREE_CAP``, pruned per step
    by the engine), ``topk`` candidates per slot."""

    name = "ddtree"

    def __init__(self, budget: int | str = 16, topk: int = 8, lookup: tuple[int, int] | None = None):
        super().__init__("greedy")
        self.lookup = lookup  # (prompt_lookup_max, prompt_lookup_min): graft the prompt-lookup continuation
        self.auto_budget = budget == AUTO
        budget = AUTO_TREE_CAP if self.auto_budget else budget
        if not isinstance(budget, int) or budget < 2:
            raise ValueError(f"tree_budget must be >= 2 (the root and one draft) or 'auto', got {budget!r}")
        self.tree_budget, self.topk = budget, topk

    def chains(self, d: DraftOutput) -> list[list[int] | None] | None:
        """Per row, the tokens that followed the latest earlier occurrence of its last tokens (prompt lookup,
        as the ``ngram`` method; ``None`` without a match), at most as deep as the drafted block."""
        if self.lookup is None or d.requests is None:
            return None
        k_max, k_min = self.lookup
        n = d.logits.shape[1]
        return [lookup_request(r, n, k_max, k_min, pad=False) for r in d.requests]

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("walk"):
            return tree_proposal(build_tree(d.logits, d.anchor_tokens, self.tree_budget, self.topk, self.chains(d)))


class LatticeTreeProposer(TreeProposer):
    """LiLiCorr's tree: best-first over the lattice with the head's conditional scores."""

    name = "lilicorr-tree"

    def __init__(
        self,
        head: LiLiCorrHead,
        embed: torch.nn.Embedding,
        budget: int | str = 16,
        lookup: tuple[int, int] | None = None,
    ):
        super().__init__(budget, head.k, lookup)
        self.lattice = LiLiCorrProposer(head, embed)

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        ids, lp, scores = self.lattice.lattice(d, timer)
        with timer.stage("walk"):
            return tree_proposal(build_lattice_tree(ids, lp, scores, d.anchor_tokens, self.tree_budget, self.chains(d)))


# Default 16: measured faster than ``auto`` on SmolLM2 (docs/results/smollm2-speed-notes.md, "Auto budget").
BUDGET = Option(
    "tree_budget",
    16,
    "tree nodes verified per step, the pending token included; auto: each step the best-first prefix "
    f"(up to {AUTO_TREE_CAP}) that pays for its measured verify cost",
    auto=True,
)


LOOKUP = (
    Option(
        "prompt_lookup_max",
        0,
        "trees: also graft the prompt-lookup continuation of the last k ≤ this many tokens as a branch (0: off)",
        minimum=0,
    ),
    Option("prompt_lookup_min", 1, "trees: shortest suffix the prompt lookup matches"),
)


def lookup_option(options: dict) -> tuple[int, int] | None:
    k_max, k_min = options["prompt_lookup_max"], options["prompt_lookup_min"]
    if k_max and k_min > k_max:
        raise ValueError(f"need prompt_lookup_min <= prompt_lookup_max, got {k_min}, {k_max}")
    return (k_max, k_min) if k_max else None


@register
class DDTree(Method):
    name = "ddtree"
    per_draft_length = False
    help = "best-first tree over the drafter's per-slot marginals (training-free)"
    options = (
        BUDGET,
        Option("tree_topk", 8, "candidates per slot (8: the lattice width of the shipped drafters)"),
        *LOOKUP,
    )

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        o = ctx.options
        return TreeProposer(o["tree_budget"], o["tree_topk"], lookup_option(o))


@register
class LiLiCorrTree(Method):
    name = "lilicorr-tree"
    per_draft_length = False
    help = "best-first tree over the LiLiCorr lattice with the head's conditional scores"
    options = (BUDGET, *LOOKUP)

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        o = ctx.options
        return LatticeTreeProposer(lilicorr_head(ctx), ctx.target.embed_tokens, o["tree_budget"], lookup_option(o))
