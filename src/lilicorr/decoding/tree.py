"""Tree building — DDTree (training-free, over DFlash's per-slot marginals; Ringel & Romano, 2026) and
the LiLiCorr lattice tree (over the head's conditional pair scores); their proposers are in
``methods/trees.py``.

A best-first search picks the most likely prefixes up to a node budget — DDTree scores a path by the
product of the per-slot top-k marginals, the lattice tree by those marginals times the head's chain of
conditionals over the K candidates; the
target scores the whole tree in one pass with an ancestor-only mask; verification then follows the
target's own choices down the tree (argmax at T = 0, a sample of the processed target distribution at
T > 0) and stops at the first choice that is not a child — every emitted token is the target's own,
so the output is exactly lossless.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from lilicorr.models.head import HeadScores


@dataclass
class TokenTree:
    tokens: torch.Tensor  # [batch, N] node tokens, node 0 = the pending (root) token
    parents: torch.Tensor  # [batch, N] parent node index, −1 for the root
    depth: torch.Tensor  # [batch, N] 0 for the root
    score: torch.Tensor  # [batch, N] the path's log-score (0 for the root); best-first order: non-increasing


def _best_first(dist, depth_max: int, budget: int) -> list[tuple[int, int, int, float]]:
    """Best-first search over a lattice of conditional distributions, shared by both tree proposers.

    ``dist(d, parent_cand)`` → the distribution of depth ``d`` (1-based) given the parent's candidate
    index (None at the root), as ``[(log-prob, candidate index, token)]`` sorted best first. A node's
    score is the sum of log-probs along its path. Returns the nodes after the root in pick order as
    (token, parent node, depth, path score); parents always precede their children, so every prefix of
    the list is itself a tree (what adaptive verification prunes to).
    """
    nodes: list[tuple[int, int, int, float]] = []
    first = dist(1, None) if depth_max else []
    # heap: (−score, tiebreak, parent node, depth, rank in its distribution, parent cand, parent score)
    heap = [(-first[0][0], 0, 0, 1, 0, None, 0.0)] if first else []
    tie = 1
    while heap and len(nodes) + 1 < budget:
        neg, _, parent, d, rank, parent_cand, parent_score = heapq.heappop(heap)
        options = dist(d, parent_cand)
        _, cand, token = options[rank]
        nodes.append((token, parent, d, -neg))
        node = len(nodes)
        if rank + 1 < len(options):  # next sibling
            heapq.heappush(
                heap, (-(parent_score + options[rank + 1][0]), tie, parent, d, rank + 1, parent_cand, parent_score)
            )
            tie += 1
        if d < depth_max:  # best child
            child = dist(d + 1, cand)
            heapq.heappush(heap, (neg - child[0][0], tie, node, d + 1, 0, cand, -neg))
            tie += 1
    return nodes


def graft_chain(
    nodes: list[tuple[int, int, int, float]], chain: list[int] | None, budget: int
) -> list[tuple[int, int, int, float]]:
    """Merge a deterministic chain (a prompt-lookup continuation) into a best-first tree as a branch from
    the root, and keep the best ``budget − 1`` nodes.

    The chain's nodes get score 0 (log 1: the tree's proposer vouches for them; a tree node it passes
    through is promoted); nodes are then ordered by (score descending, depth) — a node never scores above
    its parent, so parents still precede children and every prefix is a tree. Verification follows the
    target's own choices down any tree, so a grafted branch stays lossless.
    """
    if not chain:
        return nodes
    entries = [[tok, par, d, sc] for tok, par, d, sc in nodes]  # node i + 1 = entries[i]
    child = {(par, tok): i for i, (tok, par, _, _) in enumerate(nodes, start=1)}
    parent = 0
    for depth, tok in enumerate(chain, start=1):
        node = child.get((parent, tok))
        if node is None:
            entries.append([tok, parent, depth, 0.0])
            node = len(entries)
            child[(parent, tok)] = node
        else:
            entries[node - 1][3] = 0.0
        parent = node
    order = sorted(range(1, len(entries) + 1), key=lambda i: (-entries[i - 1][3], entries[i - 1][2], i))
    order = order[: budget - 1]
    new = {old: pos for pos, old in enumerate(order, start=1)}
    new[0] = 0
    return [(entries[i - 1][0], new[entries[i - 1][1]], entries[i - 1][2], entries[i - 1][3]) for i in order]


def assemble(rows: list[list[tuple[int, int, int, float]]], roots: torch.Tensor, budget: int) -> TokenTree:
    b = len(rows)
    tokens = torch.zeros(b, budget, dtype=torch.long)
    parents = torch.full((b, budget), -1, dtype=torch.long)
    depth = torch.zeros(b, budget, dtype=torch.long)
    score = torch.zeros(b, budget)
    tokens[:, 0] = roots
    for row, nodes in enumerate(rows):
        for i, (tok, par, d, sc) in enumerate(nodes, start=1):
            tokens[row, i], parents[row, i], depth[row, i], score[row, i] = tok, par, d, sc
        count = len(nodes) + 1
        if count < budget:  # short tree: pad with extra children of the root (real nodes, scored as hopeless)
            parents[row, count:] = 0
            depth[row, count:] = 1
            tokens[row, count:] = roots[row]
            score[row, count:] = float("-inf")
    return TokenTree(tokens=tokens, parents=parents, depth=depth, score=score)


def build_tree(
    logits: torch.Tensor, roots: torch.Tensor, budget: int, topk: int, chains: list[list[int] | None] | None = None
) -> TokenTree:
    """DDTree: best-first tree of ``budget`` nodes (root included) per row from draft logits ``[batch, n, V]``,
    scoring a path by the product of the per-slot marginals (slots independent); ``chains`` (per row, or
    None) are grafted in as certain branches (``graft_chain``)."""
    b, n, vocab = logits.shape
    topk = min(topk, vocab)
    lp, ids = torch.log_softmax(logits.float(), -1).topk(topk, dim=-1)  # [batch, n, k], sorted
    lp, ids = lp.tolist(), ids.tolist()
    rows = []
    for row in range(b):
        per_depth = [list(zip(lp[row][s], range(topk), ids[row][s], strict=True)) for s in range(n)]
        rows.append(_best_first(lambda d, _cand, t=per_depth: t[d - 1], n, budget))
    return assemble(_grafted(rows, chains, budget), roots, budget)


def _grafted(rows: list, chains: list[list[int] | None] | None, budget: int) -> list:
    return rows if chains is None else [graft_chain(r, c, budget) for r, c in zip(rows, chains, strict=True)]


def build_lattice_tree(
    ids: torch.Tensor,
    lp: torch.Tensor,
    scores: HeadScores,
    roots: torch.Tensor,
    budget: int,
    chains: list[list[int] | None] | None = None,
) -> TokenTree:
    """LiLiCorr tree: best-first over the K-candidate lattice, the drafter's marginals re-weighted by the
    head's *conditional* scores.

    A child's log-score is ``lp[s, cand] + log_softmax(pair[s − 1, parent cand, :])[cand]``: the drafter's
    own log-probability of the candidate plus the head's conditional over the K candidates given the
    parent (the distribution the walks use; ``start`` at slot 0). The head alone is over-confident (its
    softmax over K puts nearly all mass on one continuation, so a tree on it alone is almost a chain) and
    the marginals alone ignore which tokens fit together; on recorded SmolLM2 drafting states the sum
    accepts more than either and than DDTree at equal budget (``benchmarks/tree_scoring.py``).
    ``ids``/``lp`` ``[batch, n, K]`` (``lp`` the full-vocabulary log-softmax of each candidate);
    ``scores.start [batch, K]``, ``scores.pair [batch, n−1, K, K]``; ``chains`` as in ``build_tree``.
    """
    b, n, k = ids.shape
    lp = lp.float()
    start = torch.log_softmax(scores.start.float(), -1) + lp[:, 0]  # [batch, K]
    pair = torch.log_softmax(scores.pair.float(), -1) + lp[:, 1:, None, :]  # [batch, n−1, K, K]
    s_val, s_idx = start.sort(-1, descending=True)
    p_val, p_idx = pair.sort(-1, descending=True)
    ids_l, s_val, s_idx, p_val, p_idx = ids.tolist(), s_val.tolist(), s_idx.tolist(), p_val.tolist(), p_idx.tolist()
    rows = []
    for row in range(b):

        def dist(d: int, cand: int | None, row: int = row) -> list[tuple[float, int, int]]:
            vals, idx = (s_val[row], s_idx[row]) if d == 1 else (p_val[row][d - 2][cand], p_idx[row][d - 2][cand])
            return [(v, c, ids_l[row][d - 1][c]) for v, c in zip(vals, idx, strict=True)]

        rows.append(_best_first(dist, n, budget))
    return assemble(_grafted(rows, chains, budget), roots, budget)
