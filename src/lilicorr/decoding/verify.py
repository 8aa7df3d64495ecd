"""Lossless verification of one drafted block against the target, for one request.

The same functions serve generate, bench and serve. ``p`` rows are the *processed* target
distribution (temperature, top-k, top-p) so the output is distributed exactly as target sampling
with those settings; ``q`` is whatever the proposer actually sampled from (one-hot for greedy
drafting, the slot marginal for DFlash, the K-candidate walk distribution for LiLiCorr).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.decoding.sampling import sample_from


@dataclass
class Verdict:
    accepted: int  # drafted tokens accepted (0..n)
    tokens: list[int]  # emitted: accepted drafts + one correction or bonus token


def verify_greedy(drafts: list[int], target_argmax: list[int]) -> Verdict:
    """T = 0: accept while the draft equals the target argmax; then emit the target argmax.

    ``target_argmax`` has ``n + 1`` entries: after the anchor and after each draft.
    """
    a = 0
    while a < len(drafts) and drafts[a] == target_argmax[a]:
        a += 1
    return Verdict(accepted=a, tokens=drafts[:a] + [target_argmax[a]])


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r = (p - q).clamp_min(0)
    return r if float(r.sum()) > 0 else p


def verify_standard(drafts: list[int], p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> Verdict:
    """Token-wise rejection sampling (Leviathan et al.).

    p ``[n + 1, V]`` target distributions, q ``[n, V]`` proposal distributions (dense).
    Accept draft i with probability min(1, p(x)/q(x)); on rejection emit a sample of
    norm(max(p − q, 0)); if all are accepted emit a bonus sample of ``p[n]``.
    """
    for i, x in enumerate(drafts):
        px, qx = float(p[i, x]), float(q[i, x])
        u = float(torch.rand((), generator=gen))
        if qx > 0 and u * qx < px:
            continue
        return Verdict(accepted=i, tokens=drafts[:i] + [sample_from(_residual(p[i], q[i]), gen)])
    return Verdict(accepted=len(drafts), tokens=drafts + [sample_from(p[len(drafts)], gen)])


def verify_block(drafts: list[int], p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> Verdict:
    """Block verification (Sun et al. 2024): accepts at least as many tokens in expectation.

    ``p̃_j = min(1, p̃_{j−1} p_j(x_j)/q_j(x_j))``; for j < n ``h_j = ρ_j / (ρ_j + 1 − p̃_j)`` with
    ``ρ_j = Σ_x max(p̃_j p_{j+1}(x) − q_{j+1}(x), 0)``, ``h_n = p̃_n``; τ = the last j with
    ``u_j ≤ h_j`` (0 if none). Emit ``x_1..x_τ`` and a sample of
    ``norm(max(p̃_τ p_{τ+1} − q_{τ+1}, 0))`` (τ < n) or of ``p_{n+1}`` (τ = n).
    """
    n = len(drafts)
    ptil = [1.0]
    for j, x in enumerate(drafts):
        qx = float(q[j, x])
        ratio = float(p[j, x]) / qx if qx > 0 else 0.0
        ptil.append(min(1.0, ptil[-1] * ratio))
    tau = 0
    for j in range(1, n + 1):
        if j < n:
            rho = float((ptil[j] * p[j] - q[j]).clamp_min(0).sum())
            den = rho + 1.0 - ptil[j]
            h = rho / den if den > 0 else 1.0
        else:
            h = ptil[n]
        if float(torch.rand((), generator=gen)) <= h:
            tau = j
    if tau == n:
        return Verdict(accepted=n, tokens=drafts + [sample_from(p[n], gen)])
    r = (ptil[tau] * p[tau] - q[tau]).clamp_min(0)
    if float(r.sum()) <= 0:
        r = p[tau]
    return Verdict(accepted=tau, tokens=drafts[:tau] + [sample_from(r, gen)])
