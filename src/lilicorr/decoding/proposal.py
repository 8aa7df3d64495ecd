"""What a drafting method hands the engine: a chain or a tree of draft tokens, and the q it came from.

Every method sits behind the one ``Proposer`` interface: it reads a ``DraftOutput`` (the drafter's
hidden states and logits at the mask slots, or, for model-free methods, only the requests) and
returns a ``Proposal``. The engine verifies a proposal without knowing which method made it, so a
method is lossless as long as its ``q`` is the distribution its tokens were really drawn from (chains)
or it is a tree (verified by following the target's own choices, where q plays no part).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lilicorr.decoding.stats import StageTimer

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
    """Draft tokens per row. A chain (``parents`` None): token j follows token j − 1, and ``q`` is the
    distribution each was drawn from — ``q_ids`` ``[batch, n, S]`` its support (None: the whole
    vocabulary) and ``q_probs`` ``[batch, n, S]`` (or ``[batch, n, V]``). A tree: ``parents[b, j]`` is
    the position of node j's parent in the verify sequence ``[pending, tokens…]`` (0 = the pending
    token), parents before children; no q is needed."""

    tokens: torch.Tensor  # [batch, N] long
    q_ids: torch.Tensor | None = None
    q_probs: torch.Tensor | None = None
    parents: torch.Tensor | None = None  # [batch, N] long, trees only
    # [batch, N] how sure the proposer is: a chain token's drafter probability, a tree node's path score (exp)
    confidence: torch.Tensor | None = None
    _memo: dict = field(default_factory=dict, repr=False, compare=False)  # depth / ancestors, built once

    @property
    def is_tree(self) -> bool:
        return self.parents is not None

    def prefix(self, width: int) -> Proposal:
        """The first ``width`` tokens: of a chain, a shorter draft (q is per token, so it stays exact); of a
        tree in best-first order, the subtree of its ``width`` best nodes (parents precede children)."""
        if self.is_tree:
            return Proposal(tokens=self.tokens[:, :width], parents=self.parents[:, :width])
        q_ids = None if self.q_ids is None else self.q_ids[:, :width]
        q_probs = None if self.q_probs is None else self.q_probs[:, :width]
        return Proposal(tokens=self.tokens[:, :width], q_ids=q_ids, q_probs=q_probs)

    def q_dense(self, row: int, vocab: int) -> torch.Tensor:
        """q of one chain row as ``[n, V]``."""
        assert self.q_probs is not None, "a tree proposal has no q"
        if self.q_ids is None:
            return self.q_probs[row]
        n = self.tokens.shape[1]
        return torch.zeros(n, vocab).scatter_(1, self.q_ids[row], self.q_probs[row].float())

    def tree_parents(self) -> torch.Tensor:
        """Parents in the verify sequence for chains too (``[0, 1, …, n − 1]``): ``[batch, N]``."""
        if self.parents is not None:
            return self.parents
        b, n = self.tokens.shape
        return torch.arange(n).expand(b, n)

    def depth(self) -> torch.Tensor:
        """``[batch, N + 1]`` depth of every verify position (0 for the pending token)."""
        if "depth" in self._memo:
            return self._memo["depth"]
        par = self.tree_parents()
        b, n = par.shape
        depth = torch.zeros(b, n + 1, dtype=torch.long)
        for j in range(n):  # parents precede children
            depth[:, j + 1] = depth.gather(1, par[:, j : j + 1]).squeeze(1) + 1
        self._memo["depth"] = depth
        return depth

    def ancestors(self) -> torch.Tensor:
        """``[batch, N + 1, N + 1]`` bool over the verify sequence: ``[i, j]`` = j is i or an ancestor of i."""
        if "ancestors" in self._memo:
            return self._memo["ancestors"]
        par = self.tree_parents()
        b, n = par.shape
        anc = torch.eye(n + 1, dtype=torch.bool).expand(b, n + 1, n + 1).clone()
        rows = torch.arange(b)
        for j in range(n):  # each node copies its parent's row
            anc[rows, j + 1] |= anc[rows, par[:, j]]
        self._memo["ancestors"] = anc
        return anc


class Proposer:
    """Interface of every method: ``propose`` turns a batch of drafted blocks into a ``Proposal``.

    ``needs_draft``: the engine runs the drafter (and keeps its context cache) only for methods
    that read ``DraftOutput.hidden`` / ``logits``; model-free methods set ``n``, their draft length.
    ``draft_sample_method`` is checked once, where the config is built (``decoding.config.SpecConfig``).
    """

    name = "base"
    needs_draft = True
    n = 0
    adapts_width = False  # the method asks the engine to choose each step's verify width from measured costs

    def verify_width(self, n: int) -> tuple[int, bool]:
        """The most drafted tokens one verify takes, and whether they form a tree: the engine sizes its cost
        model by it. A chain verifies its ``n`` drafted tokens; a tree method answers from its own options."""
        return n, False

    def __init__(self, draft_sample_method: str = "greedy"):
        self.draft_sample_method = draft_sample_method

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        raise NotImplementedError

    @staticmethod
    def one_hot_chain(tokens: torch.Tensor) -> Proposal:
        """A deterministic chain: q is one-hot on each drafted token."""
        return Proposal(tokens=tokens, q_ids=tokens[..., None], q_probs=torch.ones(*tokens.shape, 1))
