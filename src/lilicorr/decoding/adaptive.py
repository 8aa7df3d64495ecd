"""Adaptive verification (vLLM's ``enable_adaptive_verification``): draft the whole block, but send to
the target only the prefix whose expected accepted tokens pay for its verify cost.

Per step and batch, the width ``W`` (0…n drafted tokens per row) maximises

    Σ_rows (1 + E_row[accepted | W]) / cost(batch, W + 1),      E[accepted | W] = Σ_{j≤W} Π_{m≤j} a_m,

where ``a_m`` is the drafter's own probability of its m-th token, calibrated online per position
(realised / predicted acceptance over the steps so far), and ``cost`` is the target's measured verify
time for that batch size and width (``CostModel``, measured once when the engine starts). W = 0 is a
plain AR step: at high concurrency, when a wider verify costs more than the drafts return, the
engine falls back towards AR instead of losing to it. Lossless: W depends only on the drafter's
outputs and on past outcomes, never on the target's current logits, so verifying a prefix is just a
shorter draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


@dataclass
class CostModel:
    """Verify time ≈ ``base + per_token · batch · width`` (seconds), fitted to measured target forwards."""

    base: float
    per_token: float

    def __call__(self, batch: int, width: int) -> float:
        return self.base + self.per_token * batch * width

    @classmethod
    def measure(cls, target, width: int, batches: tuple[int, ...] = (1, 4), context: int = 64, reps: int = 2):
        """Time cached target forwards of 1 and ``width`` tokens after ``context`` tokens, at each batch size."""
        xs, ys = [], []
        for b in batches:
            for w in (1, width):
                best = float("inf")
                for _ in range(reps):
                    state = target.new_state(b)
                    target.forward(state, torch.full((b, context), 5), want_taps=False)
                    t0 = time.perf_counter()
                    target.forward(state, torch.full((b, w), 5), want_taps=False)
                    best = min(best, time.perf_counter() - t0)
                xs.append(b * w)
                ys.append(best)
        x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)
        per = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum().clamp_min(1e-12))
        per = max(per, 0.0)
        return cls(base=max(float(y.mean() - per * x.mean()), 1e-6), per_token=per)


@dataclass
class AdaptiveWidth:
    """Chooses the verify width and keeps the per-position calibration (predicted vs realised)."""

    n: int
    cost: CostModel
    predicted: list[float] = field(default_factory=list)  # per position: Σ drafter probability
    realised: list[float] = field(default_factory=list)  # per position: Σ accepted (given reached)

    def __post_init__(self) -> None:
        self.predicted = self.predicted or [0.0] * self.n
        self.realised = self.realised or [0.0] * self.n

    def scale(self) -> torch.Tensor:
        """Per-position calibration factor (1 until a position has evidence; prior of 4 pseudo-steps)."""
        pred, real = torch.tensor(self.predicted), torch.tensor(self.realised)
        return (real + 4.0) / (pred + 4.0)

    def expected(self, conf: torch.Tensor) -> torch.Tensor:
        """``conf [batch, n]`` → expected accepted tokens for each width 0…n: ``[batch, n + 1]``."""
        a = (conf.double() * self.scale().double()[: conf.shape[1]]).clamp(0, 1)
        reach = a.cumprod(1)  # [batch, n]: P(first j+1 drafts all accepted)
        return torch.cat([torch.zeros(conf.shape[0], 1, dtype=torch.float64), reach.cumsum(1)], 1)

    def choose(self, conf: torch.Tensor) -> int:
        b, n = conf.shape
        gain = (1.0 + self.expected(conf)).sum(0)  # [n + 1]: tokens per step over the batch, per width
        value = torch.stack([gain[w] / self.cost(b, w + 1) for w in range(n + 1)])
        return int(value.argmax())

    def update(self, conf: torch.Tensor, accepted: list[int], width: int) -> None:
        """Positions each row's verify reached: predicted += drafter probability, realised += accepted."""
        for row, a in enumerate(accepted):
            for j in range(min(width, a + 1)):  # position j was reached (all before it accepted)
                self.predicted[j] += float(conf[row, j])
                self.realised[j] += 1.0 if j < a else 0.0

    def calibration(self) -> list[dict]:
        """Predicted vs realised acceptance per position (over the steps that reached it)."""
        return [
            {"position": j + 1, "predicted": round(p, 2), "realised": round(r, 2)}
            for j, (p, r) in enumerate(zip(self.predicted, self.realised, strict=True))
        ]
