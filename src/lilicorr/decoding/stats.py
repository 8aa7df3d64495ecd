"""Speculative-decoding counters with vLLM's definitions, and a per-stage cycle timer.

τ (mean acceptance length) = 1 + accepted / drafts, the bonus token included, exactly as vLLM
logs it and as ``/metrics`` lets a client compute it, so figures from our engine, our server and
vLLM are comparable.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

STAGES = ("target_verify", "draft_backbone", "candidates", "head", "walk", "other")


@dataclass
class SpecStats:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    acceptance_histogram: list[int] = field(default_factory=list)  # [a] = steps that accepted a drafts
    # adaptive verification: draft tokens the drafter made (num_draft_tokens counts those sent to the target)
    num_proposed_tokens: int = 0
    # adaptive verification: engine steps the draft gate ran without the drafter (drafting measured slower)
    num_paused_steps: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        if len(self.accepted_per_position) < drafted:
            self.accepted_per_position += [0] * (drafted - len(self.accepted_per_position))
        for i in range(accepted):
            self.accepted_per_position[i] += 1
        if len(self.acceptance_histogram) <= drafted:
            self.acceptance_histogram += [0] * (drafted + 1 - len(self.acceptance_histogram))
        self.acceptance_histogram[accepted] += 1

    def merge(self, other: SpecStats) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.num_proposed_tokens += other.num_proposed_tokens
        self.num_paused_steps += other.num_paused_steps
        for name in ("accepted_per_position", "acceptance_histogram"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if len(mine) < len(theirs):
                mine += [0] * (len(theirs) - len(mine))
            for i, v in enumerate(theirs):
                mine[i] += v

    @property
    def tau(self) -> float:
        """Mean acceptance length, bonus included (1.0 when nothing was drafted)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def per_position_rate(self) -> list[float]:
        return [c / self.num_drafts for c in self.accepted_per_position] if self.num_drafts else []

    def as_dict(self) -> dict:
        return {
            "tau": round(self.tau, 4),
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_verified_tokens": self.num_draft_tokens,  # draft tokens sent to the target (vLLM: draft tokens)
            "num_proposed_tokens": self.num_proposed_tokens,
            "num_paused_steps": self.num_paused_steps,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_histogram": list(self.acceptance_histogram),
        }


class StageTimer:
    """Accumulates wall time per named stage of the draft–verify cycle."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def as_dict(self) -> dict[str, float]:
        return {s: round(self.seconds.get(s, 0.0), 6) for s in STAGES}

    def merge(self, other: StageTimer) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] += v
