"""DDTree: training-free tree drafting over DFlash's per-slot marginals (Ringel & Romano, 2026).

A best-first search over products of the per-slot top-k marginal probabilities picks the most
likely prefixes up to a node budget; the target scores the whole tree in one pass with an
ancestor-only mask; verification then follows the target's own choices down the tree (argmax at
T = 0, a sample of the processed target distribution at T > 0) and stops at the first choice that
is not a child — every emitted token is the target's own, so the output is exactly lossless.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from lilicorr.decoding.engine import SpecConfig, SpecEngine
from lilicorr.decoding.proposers import Proposer
from lilicorr.decoding.sampling import choose_token


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


def build_tree(logits: torch.Tensor, roots: torch.Tensor, budget: int, topk: int) -> TokenTree:
    """Best-first tree of ``budget`` nodes (root included) per row from draft logits ``[batch, n, V]``."""
    b, n, _ = logits.shape
    lp, ids = torch.log_softmax(logits.float(), -1).topk(topk, dim=-1)  # [batch, n, k]
    lp, ids = lp.tolist(), ids.tolist()
    tokens = torch.zeros(b, budget, dtype=torch.long)
    parents = torch.full((b, budget), -1, dtype=torch.long)
    depth = torch.zeros(b, budget, dtype=torch.long)
    tokens[:, 0] = roots
    for row in range(b):
        # Heap entries: (−score, tiebreak, parent node, depth of the child, rank among the top-k).
        heap = [(-lp[row][0][0], 0, 0, 1, 0)] if n else []
        count, tie = 1, 1
        while heap and count < budget:
            neg, _, parent, d, rank = heapq.heappop(heap)
            node = count
            tokens[row, node], parents[row, node], depth[row, node] = ids[row][d - 1][rank], parent, d
            count += 1
            if rank + 1 < topk:  # next sibling
                parent_score = -neg - lp[row][d - 1][rank]
                heapq.heappush(heap, (-(parent_score + lp[row][d - 1][rank + 1]), tie, parent, d, rank + 1))
                tie += 1
            if d < n:  # first child
                heapq.heappush(heap, (neg - lp[row][d][0], tie, node, d + 1, 0))
                tie += 1
        if count < budget:  # short tree: pad with extra children of the root (real, scored nodes)
            parents[row, count:] = 0
            depth[row, count:] = 1
            tokens[row, count:] = roots[row]
    return TokenTree(tokens=tokens, parents=parents, depth=depth)


class TreeProposer(Proposer):
    name = "ddtree"

    def __init__(self, budget: int = 16, topk: int = 4):
        super().__init__("greedy")
        self.budget, self.topk = budget, topk


class DDTreeEngine(SpecEngine):
    """The speculative engine with tree drafting and tree verification (method ``ddtree``)."""

    def __init__(self, target, draft, config: SpecConfig | None = None, budget: int = 16, topk: int = 4):
        super().__init__(target, draft, config or SpecConfig(method="dflash"), proposer=TreeProposer(budget, topk))
        self.method = "ddtree"

    @torch.no_grad()
    def step(self):
        if not self.seqs:
            return []
        b = len(self.seqs)
        start = self.tstate.lengths.clone()
        pending = torch.tensor([s.pending for s in self.seqs])
        d = self._draft(pending, start)
        with self.timer.stage("walk"):
            tree = build_tree(d.logits, pending, self.proposer.budget, self.proposer.topk)
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
