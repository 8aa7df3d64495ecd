"""Walks over LiLiCorr scores: the only sequential part of the head, K-wide per slot.

Both walks run over a whole batch at once (one gather + argmax/sample per slot, no host syncs).
The probabilistic walk returns the realised proposal ``q`` over the K candidates of each slot, so
rejection sampling against the target stays exact.
"""

from __future__ import annotations

import torch

from lilicorr.decoding.sampling import inverse_cdf
from lilicorr.models.head import HeadScores


def _rows(scores: HeadScores, s: int, prev: torch.Tensor) -> torch.Tensor:
    """Score row of slot ``s`` given the chosen predecessor index ``prev`` ``[batch]`` → ``[batch, K]``."""
    if s == 0:
        return scores.start
    pair = scores.pair[:, s - 1]  # [batch, K, K]
    return pair[torch.arange(pair.shape[0], device=pair.device), prev]


def walk_greedy(scores: HeadScores) -> torch.Tensor:
    """Chosen candidate index per slot ``[batch, n]``: argmax of start, then of each pair row.

    ``torch.argmax`` returns the first maximum, i.e. ties go to the lowest index (higher rank).
    """
    n = scores.pair.shape[1] + 1
    prev = torch.zeros(scores.start.shape[0], dtype=torch.long, device=scores.start.device)
    picks = []
    for s in range(n):
        prev = _rows(scores, s, prev).argmax(-1)
        picks.append(prev)
    return torch.stack(picks, 1)


def walk_probabilistic(
    scores: HeadScores, temperature: torch.Tensor, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample each slot from ``softmax(row / T)`` given the sampled predecessor.

    temperature ``[batch]`` (rows with T = 0 take the argmax, q one-hot); uniforms ``[batch, n]`` in
    [0, 1) drawn from each request's own generator. Returns picks ``[batch, n]`` and
    q ``[batch, n, K]`` — the realised proposal distribution of each slot.
    """
    b = scores.start.shape[0]
    n = scores.pair.shape[1] + 1
    greedy = temperature <= 0
    t = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]  # [batch, 1]
    prev = torch.zeros(b, dtype=torch.long)
    picks, qs = [], []
    for s in range(n):
        row = _rows(scores, s, prev)  # [batch, K]
        q = torch.softmax(row / t, dim=-1)
        sampled = inverse_cdf(q, uniforms[:, s])
        arg = row.argmax(-1)
        pick = torch.where(greedy, arg, sampled)
        q = torch.where(greedy[:, None], torch.nn.functional.one_hot(arg, q.shape[-1]).to(q.dtype), q)
        picks.append(pick)
        qs.append(q)
        prev = pick
    return torch.stack(picks, 1), torch.stack(qs, 1)
