"""Where a campaign arm's held-out τ is heading (``training/campaign_projection.py``): a log2 fit and the recent
straight line, and the step each reaches a goal at."""

from __future__ import annotations

import math

import pytest

from lilicorr.training.campaign_projection import project


def curve(taus: dict[int, float], key: str = "tau_greedy") -> list[dict]:
    return [{"step": s, key: t, "positions": s * 900} for s, t in taus.items()]


def test_a_log_shaped_curve_gives_its_slope_and_the_step_of_the_goal():
    points = {s: 2.0 + 0.1 * math.log2(s / 1000) for s in (1000, 2000, 4000, 8000)}
    p = project(curve(points), "tau_greedy", goal=2.5)
    assert p.points == 4 and p.per_doubling == pytest.approx(0.1)
    assert p.goal_step_fit == 32000  # five doublings past 1000
    # the last three points rise 0.1 over 2000 steps, then 0.1 over 4000: a straight line between them
    assert 0.0 < p.per_1000_recent < 0.05 and p.goal_step_recent > 8000


def test_fewer_than_three_points_say_nothing_and_a_goal_reached_is_now():
    assert project(curve({1000: 2.0, 2000: 2.1}), "tau_greedy") is None
    p = project(curve({1000: 2.0, 2000: 2.1, 3000: 2.6}), "tau_greedy", goal=2.5)
    assert p.goal_step_fit == p.goal_step_recent == 3000


def test_a_flat_or_falling_curve_never_reaches_the_goal_and_the_walk_is_followed_when_asked():
    p = project(curve({1000: 2.3, 2000: 2.2, 3000: 2.1}), "tau_greedy", goal=3.0)
    assert p.goal_step_fit is None and p.goal_step_recent is None and p.per_doubling < 0
    walk = curve({1000: 2.4, 2000: 2.5, 3000: 2.6}, "walk_tau_greedy")
    assert project(walk, "tau_greedy") is None  # no greedy points in a walk-only curve
    assert project(walk, "walk_tau_greedy").last_tau == 2.6
