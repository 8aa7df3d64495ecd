"""Lossless verification of a batch of proposals — chains and trees — against one target pass.

One verifier serves generate, bench and serve, and every method. ``p`` is the *processed* target
distribution (temperature, top-k, top-p), so the output is distributed exactly as target sampling
with those settings.

- Chains, greedy rows: accept while the draft equals the target argmax (batched tensor ops).
- Chains, sampled rows: rejection sampling against the ``q`` the proposer really sampled from —
  token-wise (``standard``, Leviathan et al.) or ``block`` (Sun et al. 2024) — vectorised over the
  block; one row at a time because every request samples with its own generator and settings.
- Trees: the target's own choice is drawn at every node (argmax, or a sample of p) and the walk
  follows the child that carries it; every emitted token is the target's own, so q plays no part.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.decoding.proposal import Proposal
from lilicorr.decoding.sampling import choose_token, inverse_cdf, sample_from, target_probs

REJECTION_METHODS = ("standard", "block")


@dataclass
class Verdict:
    path: list[int]  # verify positions kept, in order (0 = the pending token)
    tokens: list[int]  # emitted: the accepted drafts + one correction or bonus token

    @property
    def accepted(self) -> int:
        return len(self.path) - 1


def _residual(r: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return r if float(r.sum()) > 0 else p


def accept_standard(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> Verdict:
    """Token-wise rejection sampling: accept draft i with probability min(1, p(x)/q(x)); at the first
    rejection emit a sample of norm(max(p − q, 0)); if all pass, a bonus sample of ``p[n]``.
    ``drafts [n]``, ``p [n + 1, V]``, ``q [n, V]`` (dense)."""
    n = drafts.shape[0]
    idx = torch.arange(n)
    px, qx = p[idx, drafts], q[idx, drafts]  # [n]
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    ok = (qx > 0) & (u * qx.double() < px.double())
    a = int(ok.long().cumprod(0).sum())
    drafted = drafts.tolist()
    if a == n:
        return Verdict(list(range(n + 1)), drafted + [sample_from(p[n], gen)])
    last = sample_from(_residual((p[a] - q[a]).clamp_min(0), p[a]), gen)
    return Verdict(list(range(a + 1)), drafted[:a] + [last])


def accept_block(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> Verdict:
    """Block verification (Sun et al. 2024): accepts at least as many tokens in expectation.

    ``p̃_j = min(1, p̃_{j−1} p_j(x_j)/q_j(x_j))`` — in logs a clamped running sum, ``S_j − max_{i≤j} S_i``;
    for j < n ``h_j = ρ_j / (ρ_j + 1 − p̃_j)`` with ``ρ_j = Σ_x max(p̃_j p_{j+1}(x) − q_{j+1}(x), 0)``,
    ``h_n = p̃_n``; τ = the last j with ``u_j ≤ h_j`` (0 if none). Emit ``x_1..x_τ`` and a sample of
    ``norm(max(p̃_τ p_{τ+1} − q_{τ+1}, 0))`` (τ < n) or of ``p_{n+1}`` (τ = n).
    """
    n = drafts.shape[0]
    idx = torch.arange(n)
    p64, q64 = p.double(), q.double()
    px, qx = p64[idx, drafts], q64[idx, drafts]  # [n]
    log_ratio = torch.where(qx > 0, px.log() - qx.log(), torch.full_like(px, float("-inf")))
    s = torch.cat([torch.zeros(1, dtype=torch.float64), log_ratio.cumsum(0)])  # S_0..S_n
    ptil = (s - s.cummax(0).values).exp()  # [n + 1], ptil[0] = 1
    rho = (ptil[1:n, None] * p64[1:n] - q64[1:n]).clamp_min(0).sum(-1)  # [n − 1]: j = 1..n−1
    den = rho + 1.0 - ptil[1:n]
    h = torch.cat([torch.where(den > 0, rho / den.clamp_min(1e-300), torch.ones_like(rho)), ptil[n:]])  # [n]
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    passed = (u <= h).nonzero()
    tau = int(passed[-1]) + 1 if len(passed) else 0
    drafted = drafts.tolist()
    if tau == n:
        return Verdict(list(range(n + 1)), drafted + [sample_from(p[n], gen)])
    r = (ptil[tau] * p64[tau] - q64[tau]).clamp_min(0)
    return Verdict(list(range(tau + 1)), drafted[:tau] + [sample_from(_residual(r, p64[tau]), gen)])


class Verifier:
    """Verifies a batch: ``verify(proposal, logits [batch, N + 1, V], requests)`` → one ``Verdict`` per row.

    Subclass and override ``accept`` to change the chain rule for sampled rows (the broken-verifier
    test does, to show the statistical tests catch a lossy rule)."""

    def __init__(self, rejection_sample_method: str = "standard"):
        if rejection_sample_method not in REJECTION_METHODS:
            raise ValueError(
                f"rejection_sample_method {rejection_sample_method!r}: expected one of {REJECTION_METHODS}"
            )
        self.rejection_sample_method = rejection_sample_method

    def accept(self, drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> Verdict:
        rule = accept_block if self.rejection_sample_method == "block" else accept_standard
        return rule(drafts, p, q, gen)

    def verify(self, proposal: Proposal | None, logits: torch.Tensor, requests: list) -> list[Verdict]:
        if proposal is None:  # nothing drafted: the target's own next token
            return [Verdict([0], [choose_token(logits[i, 0], r.params, r.generator)]) for i, r in enumerate(requests)]
        if proposal.is_tree:
            return self._tree(proposal, logits, requests)
        return self._chain(proposal, logits, requests)

    def _chain(self, proposal: Proposal, logits: torch.Tensor, requests: list) -> list[Verdict]:
        tokens = proposal.tokens  # [batch, n]
        n = tokens.shape[1]
        argmax = logits.argmax(-1)  # [batch, n + 1]
        accepted = (tokens == argmax[:, :n]).long().cumprod(1).sum(1)  # [batch], greedy rows
        drafts, best = tokens.tolist(), argmax.tolist()
        out = []
        for i, r in enumerate(requests):
            if r.params.greedy:
                a = int(accepted[i])
                out.append(Verdict(list(range(a + 1)), drafts[i][:a] + [best[i][a]]))
            else:
                p = target_probs(logits[i], r.params)  # [n + 1, V]
                out.append(self.accept(tokens[i], p, proposal.q_dense(i, logits.shape[-1]), r.generator))
        return out

    def _tree(self, proposal: Proposal, logits: torch.Tensor, requests: list) -> list[Verdict]:
        b, n = proposal.tokens.shape
        choice = logits.argmax(-1)  # [batch, N + 1]: the target's choice at every node
        for i, r in enumerate(requests):
            if not r.params.greedy:
                probs = target_probs(logits[i], r.params).double()  # [N + 1, V]
                choice[i] = inverse_cdf(probs, torch.rand(n + 1, generator=r.generator, dtype=torch.float64))
        parents = proposal.parents
        on_path = torch.zeros(b, n + 1, dtype=torch.bool)  # [batch, N + 1]: node reached by the target's walk
        on_path[:, 0] = True
        for j in range(n):  # parents precede children: one batched step per node
            par = parents[:, j : j + 1]
            reached = on_path.gather(1, par).squeeze(1)
            on_path[:, j + 1] = reached & (proposal.tokens[:, j] == choice.gather(1, par).squeeze(1))
        depth = proposal.depth()
        deepest = torch.where(on_path, depth, -1).argmax(1)  # [batch]: first of the deepest reached nodes
        anc = proposal.ancestors()
        seq = torch.cat([torch.zeros(b, 1, dtype=torch.long), proposal.tokens], 1)  # [batch, N + 1]
        out = []
        for i in range(b):
            path = anc[i, deepest[i]].nonzero().squeeze(1).tolist()  # root → deepest, in position order
            out.append(Verdict(path, seq[i, path[1:]].tolist() + [int(choice[i, deepest[i]])]))
        return out
