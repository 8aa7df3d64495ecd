"""Tree methods: ``ddtree`` (training-free, best-first over DFlash's per-slot marginals; Ringel &
Romano, 2026) and ``lilicorr-tree`` (best-first over the K-candidate lattice with the head's
conditional pair scores). Both return a tree proposal; the engine verifies it in one target pass
with an ancestor-only mask and follows the target's own choices down it (lossless)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.decoding.methods.base import AUTO, BuildContext, Method, option, register
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


@dataclass(frozen=True)
class TreeOptions:
    """The tree methods' own options (each checked once, by its ``option`` bound, when resolved)."""

    # Default 16: measured faster than ``auto`` on SmolLM2 (docs/results/smollm2-speed-notes.md, "The adaptive arms
    # without trees") and than 8 behind the draft gate with packed bf16 layers; with the 4-bit projections the two
    # were level, or 8 up to 10 % ahead (4 of 6 cells; docs/results/smollm2-defaults-notes.md, session 41).
    tree_budget: int | str = option(
        16,
        "tree nodes verified per step, the pending token included; auto: each step the best-first prefix "
        f"(up to {AUTO_TREE_CAP}) that pays for its measured verify cost",
        auto=True,
        minimum=2,
        why="the pending token and one draft",
    )
    prompt_lookup_max: int = option(
        0,
        "trees: also graft the prompt-lookup continuation of the last k ≤ this many tokens as a branch (0: off)",
        minimum=0,
    )
    prompt_lookup_min: int = option(1, "trees: shortest suffix the prompt lookup matches")

    def __post_init__(self) -> None:
        if self.prompt_lookup_max and self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"need prompt_lookup_min <= prompt_lookup_max, got {self.prompt_lookup_min}, {self.prompt_lookup_max}"
            )

    @property
    def auto(self) -> bool:
        return self.tree_budget == AUTO

    @property
    def nodes(self) -> int:
        """Nodes per tree, the pending token included (``auto``: the cap the engine prunes from)."""
        return AUTO_TREE_CAP if self.tree_budget == AUTO else int(self.tree_budget)

    @property
    def lookup(self) -> tuple[int, int] | None:
        """(prompt_lookup_max, prompt_lookup_min) of the grafted prompt lookup; None: off."""
        return (self.prompt_lookup_max, self.prompt_lookup_min) if self.prompt_lookup_max else None


@dataclass(frozen=True)
class DDTreeOptions(TreeOptions):
    tree_topk: int = option(8, "candidates per slot (8: the lattice width of the shipped drafters)")


class TreeProposer(Proposer):
    """DDTree's tree: ``options.nodes`` nodes (root included; ``auto``: up to ``AUTO_TREE_CAP``, pruned per
    step by the engine), ``topk`` candidates per slot."""

    name = "ddtree"

    def __init__(self, options: TreeOptions, topk: int = 8):
        super().__init__("greedy")
        self.options, self.topk = options, topk
        self.lookup = options.lookup  # (prompt_lookup_max, prompt_lookup_min): graft the prompt-lookup continuation
        self.tree_budget = options.nodes  # nodes, root included
        self.adapts_width = options.auto  # ``auto``: the engine prunes the tree per step from measured costs

    def verify_width(self, n: int) -> tuple[int, bool]:
        """A tree verifies its drafted nodes (the root is the pending token) whatever the block length."""
        return max(self.tree_budget - 1, 0), True

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

    def __init__(self, head: LiLiCorrHead, embed: torch.nn.Embedding, options: TreeOptions):
        super().__init__(options, head.k)
        self.lattice = LiLiCorrProposer(head, embed)

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        ids, lp, scores = self.lattice.lattice(d, timer)
        with timer.stage("walk"):
            return tree_proposal(build_lattice_tree(ids, lp, scores, d.anchor_tokens, self.tree_budget, self.chains(d)))


@register
class DDTree(Method):
    name = "ddtree"
    per_draft_length = False
    help = "best-first tree over the drafter's per-slot marginals (training-free)"
    Options = DDTreeOptions

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        o: DDTreeOptions = ctx.options
        return TreeProposer(o, o.tree_topk)


@register
class LiLiCorrTree(Method):
    name = "lilicorr-tree"
    per_draft_length = False
    help = "best-first tree over the LiLiCorr lattice with the head's conditional scores"
    Options = TreeOptions

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        return LatticeTreeProposer(lilicorr_head(ctx), ctx.target.embed_tokens, ctx.options)
