"""Adaptive verification (vLLM's ``enable_adaptive_verification``): draft the whole block, but send to
the target only the prefix whose expected accepted tokens pay for its verify cost.

Per step and batch, the width ``W`` (0…n drafted tokens per row) maximises

    Σ_rows (1 + E_row[accepted | W]) / (cost(batch, W + 1) + [W ≥ 1] · draft),
    E[accepted | W] = Σ_{j≤W} Π_{m≤j} a_m,

where ``a_m`` is the acceptance of the m-th draft estimated from the drafter's own probability of it,
calibrated online per position (realised acceptance rate, see ``AdaptiveWidth``), ``draft`` the drafter's
measured time per step, and ``cost`` the target's measured verify
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
    """Chooses the verify width and keeps the per-position calibration (predicted vs realised).

    A weak drafter's probabilities are far below its real acceptance (flat softmax over a large
    vocabulary), so they are not used as probabilities: per position the engine keeps the realised
    acceptance rate over the steps that reached it (Laplace: starts at ½, optimistic, so every width
    gets tried) and the drafter's mean probability there; a row's estimate is that rate scaled by how
    sure the drafter is of this token relative to its mean, capped at 1."""

    n: int
    cost: CostModel
    reached: list[float] = field(default_factory=list)  # per position: verify steps that reached it
    predicted: list[float] = field(default_factory=list)  # per position: Σ drafter probability there
    realised: list[float] = field(default_factory=list)  # per position: Σ accepted

    def __post_init__(self) -> None:
        self.reached = self.reached or [0.0] * self.n
        self.predicted = self.predicted or [0.0] * self.n
        self.realised = self.realised or [0.0] * self.n

    def acceptance(self, conf: torch.Tensor) -> torch.Tensor:
        """``conf [batch, n]`` → calibrated conditional acceptance per row and position ``[batch, n]``."""
        n = conf.shape[1]
        reached = torch.tensor(self.reached[:n], dtype=torch.float64)
        rate = (torch.tensor(self.realised[:n], dtype=torch.float64) + 1.0) / (reached + 2.0)  # [n]
        mean_conf = torch.tensor(self.predicted[:n], dtype=torch.float64) / reached.clamp_min(1.0)
        relative = torch.where(reached > 0, conf.double() / mean_conf.clamp_min(1e-9), torch.ones_like(conf.double()))
        return (rate * relative).clamp(0, 1)

    def expected(self, conf: torch.Tensor) -> torch.Tensor:
        """Expected accepted tokens for each width 0…n: ``[batch, n + 1]``."""
        reach = self.acceptance(conf).cumprod(1)  # [batch, n]: P(first j+1 drafts all accepted)
        return torch.cat([torch.zeros(conf.shape[0], 1, dtype=torch.float64), reach.cumsum(1)], 1)

    def choose(self, conf: torch.Tensor, draft_cost: float = 0.0) -> int:
        """The width with the most tokens per second; a drafting step also pays ``draft_cost`` (seconds, the
        drafter's measured time per step), so W = 0 — an AR step, after which the engine pauses drafting —
        wins whenever the drafts do not pay for the drafter too."""
        b, n = conf.shape
        gain = (1.0 + self.expected(conf)).sum(0)  # [n + 1]: tokens per step over the batch, per width
        value = torch.stack([gain[w] / (self.cost(b, w + 1) + (draft_cost if w else 0.0)) for w in range(n + 1)])
        return int(value.argmax())

    def update(self, conf: torch.Tensor, accepted: list[int], width: int) -> None:
        """Positions each row's verify reached: reached += 1, predicted += probability, realised += accepted."""
        for row, a in enumerate(accepted):
            for j in range(min(width, a + 1)):  # position j was reached (all before it accepted)
                self.reached[j] += 1.0
                self.predicted[j] += float(conf[row, j])
                self.realised[j] += 1.0 if j < a else 0.0

    def calibration(self) -> list[dict]:
        """Per position: steps that reached it, the drafter's mean probability there, realised acceptance."""
        return [
            {
                "position": j + 1,
                "reached": int(r),
                "mean_probability": round(p / r, 4) if r else None,
                "realised": round(a / r, 4) if r else None,
            }
            for j, (r, p, a) in enumerate(zip(self.reached, self.predicted, self.realised, strict=True))
        ]
