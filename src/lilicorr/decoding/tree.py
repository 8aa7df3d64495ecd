"""Tree drafting: DDTree (training-free, over DFlash's per-slot marginals; Ringel & Romano, 2026) and
the LiLiCorr lattice tree (over the head's conditional pair scores).

A best-first search picks the most likely prefixes up to a node budget — DDTree scores a path by the
product of the per-slot top-k marginals, the lattice tree by the head's chain of conditionals; the
target scores the whole tree in one pass with an ancestor-only mask; verification then follows the
target's own choices down the tree (argmax at T = 0, a sample of the processed target distribution at
T > 0) and stops at the first choice that is not a child — every emitted token is the target's own,
so the output is exactly lossless.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from lilicorr.decoding.engine import SpecConfig, SpecEngine
from lilicorr.decoding.proposers import DraftOutput, LiLiCorrProposer, Proposer
from lilicorr.decoding.sampling import choose_token
from lilicorr.decoding.stats import StageTimer
from lilicorr.models.head import HeadScores, LiLiCorrHead


@dataclass
class TokenTree:
    tokens: torch.Tensor  # [batch, N] node tokens, node 0 = the pending (root) token
    parents: torch.Tensor  # [batch, N] parent node index, −1 for the root
    depth: torch.Tensor  # [batch, N] 0 for the root

    def ancestors(self) -> torch.Tensor:
        """``[batch, N, N]`` bool: ``[i, j]`` = j is i or an ancestor of i."""
        b, n = self.tokens.shape
        anc = torch.eye(n, dtype=torch.bool).expand(b, n, n).clone()
        for i in range(1, n):  # parents precede children, so each row copies its parent's row
            anc[torch.arange(b), i] |= anc[torch.arange(b), self.parents[:, i].clamp_min(0)]
        return anc


def _best_first(dist, depth_max: int, budget: int) -> list[tuple[int, int, int]]:
    """Best-first search over a lattice of conditional distributions, shared by both tree proposers.

    ``dist(d, parent_cand)`` → the distribution of depth ``d`` (1-based) given the parent's candidate
    index (None at the root), as ``[(log-prob, candidate index, token)]`` sorted best first. A node's
    score is the sum of log-probs along its path. Returns the nodes after the root in pick order as
    (token, parent node, depth); parents always precede their children.
    """
    nodes: list[tuple[int, int, int]] = []
    first = dist(1, None) if depth_max else []
    # heap: (−score, tiebreak, parent node, depth, rank in its distribution, parent cand, parent score)
    heap = [(-first[0][0], 0, 0, 1, 0, None, 0.0)] if first else []
    tie = 1
    while heap and len(nodes) + 1 < budget:
        neg, _, parent, d, rank, parent_cand, parent_score = heapq.heappop(heap)
        options = dist(d, parent_cand)
        _, cand, token = options[rank]
        nodes.append((token, parent, d))
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


def _assemble(rows: list[list[tuple[int, int, int]]], roots: torch.Tensor, budget: int) -> TokenTree:
    b = len(rows)
    tokens = torch.zeros(b, budget, dtype=torch.long)
    parents = torch.full((b, budget), -1, dtype=torch.long)
    depth = torch.zeros(b, budget, dtype=torch.long)
    tokens[:, 0] = roots
    for row, nodes in enumerate(rows):
        for i, (tok, par, d) in enumerate(nodes, start=1):
            tokens[row, i], parents[row, i], depth[row, i] = tok, par, d
        count = len(nodes) + 1
        if count < budget:  # short tree: pad with extra children of the root (real, scored nodes)
            parents[row, count:] = 0
            depth[row, count:] = 1
            tokens[row, count:] = roots[row]
    return TokenTree(tokens=tokens, parents=parents, depth=depth)


def build_tree(logits: torch.Tensor, roots: torch.Tensor, budget: int, topk: int) -> TokenTree:
    """DDTree: best-first tree of ``budget`` nodes (root included) per row from draft logits ``[batch, n, V]``,
    scoring a path by the product of the per-slot marginals (slots independent)."""
    b, n, _ = logits.shape
    lp, ids = torch.log_softmax(logits.float(), -1).topk(topk, dim=-1)  # [batch, n, k], sorted
    lp, ids = lp.tolist(), ids.tolist()
    rows = []
    for row in range(b):
        per_depth = [list(zip(lp[row][s], range(topk), ids[row][s], strict=True)) for s in range(n)]
        rows.append(_best_first(lambda d, _cand, t=per_depth: t[d - 1], n, budget))
    return _assemble(rows, roots, budget)


def build_lattice_tree(ids: torch.Tensor, scores: HeadScores, roots: torch.Tensor, budget: int) -> TokenTree:
    """LiLiCorr tree: best-first over the K-candidate lattice with the head's *conditional* scores.

    A child's log-prob is ``log_softmax(pair[s, parent cand, :])`` — the distribution the greedy and
    probabilistic walks use — so a path is scored by the head's joint, not by independent marginals.
    ``ids [batch, n, K]``; ``scores.start [batch, K]``, ``scores.pair [batch, n−1, K, K]``.
    """
    b, n, k = ids.shape
    start = torch.log_softmax(scores.start.float(), -1)  # [batch, K]
    pair = torch.log_softmax(scores.pair.float(), -1)  # [batch, n−1, K, K]
    s_val, s_idx = start.sort(-1, descending=True)
    p_val, p_idx = pair.sort(-1, descending=True)
    ids_l, s_val, s_idx, p_val, p_idx = ids.tolist(), s_val.tolist(), s_idx.tolist(), p_val.tolist(), p_idx.tolist()
    rows = []
    for row in range(b):

        def dist(d: int, cand: int | None, row: int = row) -> list[tuple[float, int, int]]:
            vals, idx = (s_val[row], s_idx[row]) if d == 1 else (p_val[row][d - 2][cand], p_idx[row][d - 2][cand])
            return [(v, c, ids_l[row][d - 1][c]) for v, c in zip(vals, idx, strict=True)]

        rows.append(_best_first(dist, n, budget))
    return _assemble(rows, roots, budget)


class TreeProposer(Proposer):
    """DDTree's tree: best-first over the drafter's per-slot marginals."""

    name = "ddtree"

    def __init__(self, budget: int = 16, topk: int = 4):
        super().__init__("greedy")
        self.budget, self.topk = budget, topk

    def build(self, d: DraftOutput, roots: torch.Tensor, timer: StageTimer) -> TokenTree:
        with timer.stage("walk"):
            return build_tree(d.logits, roots, self.budget, self.topk)


class LatticeTreeProposer(TreeProposer):
    """LiLiCorr's tree: best-first over the K-candidate lattice with the head's conditional scores."""

    name = "lilicorr-tree"

    def __init__(self, head: LiLiCorrHead, embed: torch.nn.Embedding, budget: int = 16):
        super().__init__(budget, head.k)
        self.lattice = LiLiCorrProposer(head, embed)

    def build(self, d: DraftOutput, roots: torch.Tensor, timer: StageTimer) -> TokenTree:
        ids, scores = self.lattice.lattice(d, timer)
        with timer.stage("walk"):
            return build_lattice_tree(ids, scores, roots, self.budget)


class DDTreeEngine(SpecEngine):
    """The speculative engine with tree drafting and tree verification (``ddtree``; with ``lattice=True``
    the LiLiCorr lattice tree, ``lilicorr-tree``, which needs a LiLiCorr checkpoint)."""

    def __init__(
        self,
        target,
        draft,
        config: SpecConfig | None = None,
        budget: int = 16,
        topk: int = 4,
        lattice: bool = False,
    ):
        if lattice and (draft is None or draft.lilicorr is None):
            raise ValueError("the LiLiCorr lattice tree needs a LiLiCorrDraftModel checkpoint")
        proposer = (
            LatticeTreeProposer(draft.lilicorr, target.embed_tokens, budget) if lattice else TreeProposer(budget, topk)
        )
        super().__init__(target, draft, config or SpecConfig(method="dflash"), proposer=proposer)
        self.method = proposer.name

    @torch.no_grad()
    def step(self):
        if not self.seqs:
            return []
        b = len(self.seqs)
        start = self.tstate.lengths.clone()
        pending = torch.tensor([s.pending for s in self.seqs])
        d = self._draft(pending, start)
        tree = self.proposer.build(d, pending, self.timer)
        with self.timer.stage("walk"):
            anc = tree.ancestors()
        with self.timer.stage("target_verify"):
            out = self.target.forward_tree(self.tstate, tree.tokens, tree.depth, anc)
        with self.timer.stage("other"):
            paths, emitted = [], []
            children = [[[] for _ in range(tree.tokens.shape[1])] for _ in range(b)]
            par = tree.parents.tolist()
            for row in range(b):
                for i, p in enumerate(par[row]):
                    if i:
                        children[row][p].append(i)
            toks = tree.tokens.tolist()
            for row, s in enumerate(self.seqs):
                node, path = 0, [0]
                while True:
                    y = choose_token(out.logits[row, node], s.request.params, s.request.generator)
                    nxt = next((c for c in children[row][node] if toks[row][c] == y), None)
                    if nxt is None:
                        break
                    node = nxt
                    path.append(node)
                paths.append(path)
                emitted.append([toks[row][i] for i in path[1:]] + [y])
            keep = torch.zeros_like(tree.tokens, dtype=torch.bool)
            for row, path in enumerate(paths):
                keep[row, path] = True
            self.target.keep_new(self.tstate, keep)
        with self.timer.stage("draft_backbone"):
            longest = max(len(p) for p in paths)
            rows = torch.zeros(b, longest, dtype=torch.long)
            valid = torch.zeros(b, longest, dtype=torch.bool)
            for row, path in enumerate(paths):
                rows[row, : len(path)] = torch.tensor(path)
                valid[row, : len(path)] = True
            taps = torch.gather(out.taps, 1, rows[..., None].expand(b, longest, out.taps.shape[-1]))
            chunk, ctx = self._draft_context(taps, start, valid)
            self.dcache.append(chunk.kv, valid)
        result = []
        with self.timer.stage("other"):
            for row, s in enumerate(self.seqs):
                accepted = len(paths[row]) - 1
                s.request.stats.record(self.proposer.budget - 1, accepted)
                self.stats.record(self.proposer.budget - 1, accepted)
                s.anchor = ctx[row, accepted]
                before = len(s.request.output_ids)
                s.request.commit(emitted[row], self.decode, out.logits[row, paths[row]])  # token j ← node path[j]
                result.append((s.request, s.request.output_ids[before:]))
                s.pending = emitted[row][-1]
            self._drop_finished()
        return result
