"""Where a campaign arm's held-out τ is heading, and how many more steps (hours) a goal would take.

Two readings of the same curve, because they disagree and the truth lies between: a least-squares fit of τ on
log2(step) over every held-out point (the shape the v6 curves followed: τ rose by a roughly constant amount per
doubling of supervised positions, docs/guide/campaign.md) — the conservative reading, since a doubling costs as
many steps as everything before it — and the straight line through the last few points (the recent pace, which
a log-shaped curve only slows from). Steps count from the campaign's start: an arm warm-started from a shipped
drafter carries training the fit does not see, so its per-doubling figure is the campaign's own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class Projection:
    points: int  # held-out evaluations the fit used
    last_step: int
    last_tau: float
    per_doubling: float  # τ gained per doubling of campaign steps (log fit)
    per_1000_recent: float  # τ gained per 1 000 steps over the last ``recent`` points
    goal: float | None = None
    goal_step_fit: int | None = None  # where the log fit reaches the goal (None: it never does, slope ≤ 0)
    goal_step_recent: int | None = None  # where the recent straight line does

    def as_dict(self) -> dict:
        return asdict(self)


def _slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b·x: (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return my - b * mx, b


def project(curve: list[dict], key: str, goal: float | None = None, recent: int = 3) -> Projection | None:
    """``curve``: an arm's held-out points (``training.curves.read_curve``); ``key``: the τ to follow
    (``tau_greedy``, or ``walk_tau_greedy`` for a LiLiCorr arm). None with fewer than three points: no trend yet."""
    by_step = {int(p["step"]): float(p[key]) for p in curve if p.get(key) is not None and p.get("step")}
    pts = sorted(by_step.items())  # [(step, τ)]
    if len(pts) < 3:
        return None
    a, b = _slope([math.log2(s) for s, _ in pts], [t for _, t in pts])
    tail = pts[-recent:]
    _, c = _slope([float(s) for s, _ in tail], [t for _, t in tail])  # τ per step, lately
    last_step, last_tau = pts[-1]
    proj = Projection(len(pts), last_step, last_tau, round(b, 4), round(c * 1000, 4))
    if goal is not None:
        proj.goal = goal
        if last_tau >= goal:
            proj.goal_step_fit = proj.goal_step_recent = last_step
        else:
            proj.goal_step_fit = max(last_step, round(2 ** ((goal - a) / b))) if b > 0 else None
            proj.goal_step_recent = round(last_step + (goal - last_tau) / c) if c > 0 else None
    return proj
