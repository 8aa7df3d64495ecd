"""What the load policy (``decoding/policy.py``) has measured: recent step costs by batch size, the verify pass's
time against the start-up cost curve, and each action's delivered against predicted tokens per second. Kept apart
from the plan itself: these are the estimators, each a small rolling window with a horizon, and the plan reads them.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

# From this many rows a batch is "loaded": a wide verify costs several plain steps, so the policy neither explores
# on an optimistic prior (``LoadPolicy.gains``) nor leaves a measured loss unpunished (``Regimes``); below it a
# drafting step costs about a plain step and the class-aware prediction decides alone.
LOADED_BATCH = 8


def size_bucket(size: float) -> int:
    return max(int(size), 1).bit_length() - 1


@dataclass
class RecentMedians:
    """Recent measurements by power-of-two size bucket: the median of the last ``window`` of a bucket that are
    at most ``horizon`` steps old (``tick`` counts steps). Why medians: one slow step — a request finishing and
    the batch being reshaped, the HTTP thread holding the interpreter — must not move an estimate. Why a
    horizon: a policy learns an action's cost only by taking it, so an estimate of the action it stopped taking
    would otherwise never be corrected (measured: one slow plain step kept a server drafting at a loss, and
    drafts measured at batch 32 kept it from drafting at batch 2); once forgotten, the action is tried again."""

    window: int = 9
    horizon: int = 64
    clock: int = 0
    samples: dict[int, deque] = field(default_factory=dict)  # bucket → (step, size, value), oldest first

    def tick(self) -> None:
        self.clock += 1

    def record(self, size: float, value: float) -> None:
        self.samples.setdefault(size_bucket(size), deque(maxlen=self.window)).append((self.clock, float(size), value))

    def fresh(self, bucket: int) -> list[tuple[int, float, float]]:
        return [s for s in self.samples.get(bucket, ()) if self.clock - s[0] <= self.horizon]

    def nearest(self, size: float) -> tuple[float, float] | None:
        """(median size, median value) of the nearest bucket with fresh measurements (ties: the larger)."""
        live = [b for b in self.samples if self.fresh(b)]
        if not live:
            return None
        near = min(live, key=lambda b: (abs(b - size_bucket(size)), -b))
        got = self.fresh(near)
        return statistics.median(s[1] for s in got), statistics.median(s[2] for s in got)


@dataclass
class Overheads(RecentMedians):
    """Seconds a step spends beyond its verify pass (the drafter, the proposal, the bookkeeping), by rows. An
    unmeasured size borrows the nearest measured one, scaled up linearly when larger and not scaled down when
    smaller: a guess errs towards costing more, and the step itself then measures the truth. Nothing fresh:
    0, optimistic, so the next such step measures it."""

    def __call__(self, rows: int) -> float:
        return self._scaled(rows, self.nearest(rows))

    @staticmethod
    def _scaled(rows: int, got: tuple[float, float] | None) -> float:
        """A measurement (median rows, seconds) applied to ``rows``: scaled up when larger, never down."""
        if got is None:
            return 0.0
        r, s = got
        return max(s, 0.0) * max(rows / max(r, 1e-9), 1.0)

    def upto(self, rows: int) -> list[float]:
        """``[self(1), …, self(rows)]``, each size bucket's measurements read once (the plan asks for every row
        count of the batch on every step: at 64 rows, 64 medians a step)."""
        near: dict[int, tuple[float, float] | None] = {}
        out = []
        for k in range(1, rows + 1):
            bucket = size_bucket(k)
            if bucket not in near:
                near[bucket] = self.nearest(k)
            out.append(self._scaled(k, near[bucket]))
        return out


@dataclass
class VerifyScale:
    """Measured verify time over the start-up cost curve's prediction, by batch size and by kind (plain
    ``[b, 1]`` or wide ``[b, W + 1]``): the curve is timed once, on short contexts, while a server's contexts
    grow to hundreds of tokens and its batches past the sizes timed. A kind not measured lately borrows the
    other kind's scale at the nearest batch, then 1."""

    plain: RecentMedians = field(default_factory=RecentMedians)
    wide: RecentMedians = field(default_factory=RecentMedians)

    def tick(self) -> None:
        self.plain.tick()
        self.wide.tick()

    def record(self, batch: int, wide: bool, ratio: float) -> None:
        (self.wide if wide else self.plain).record(batch, ratio)

    def __call__(self, batch: int, wide: bool) -> float:
        for src in (self.wide, self.plain) if wide else (self.plain, self.wide):
            got = src.nearest(batch)
            if got is not None:
                return got[1]
        return 1.0


@dataclass
class Realised:
    """How far each action's predicted tokens per second were from what its steps delivered, by batch size and
    action (drafting or plain): Σ tokens over Σ predicted rate × seconds of a key's last ``window`` steps that
    are at most ``horizon`` steps old. The plan is a prediction (cost curve, acceptance estimates); this is the
    outcome. Where both actions were measured lately at this batch size, each action's predicted value is
    scaled by its factor before they are compared (``LoadPolicy.plan``) — the goal is never to serve slower
    than plain steps would, whatever the prediction got wrong. A ratio, not a rate: the rows that draft and
    those left plain differ (greedy requests draft, sampled ones pause), so their raw rates are not comparable,
    while each prediction already knows its rows.

    Only from ``min_batch`` rows, as ``Regimes``: the factor is class-blind (greedy and sampled rows' drafting steps
    pool into one), and drafting happens when a row's estimate is high, so the steps it averages over delivered
    less than predicted by selection alone. Below a loaded batch a drafting step costs about a plain step and the
    class-aware estimates decide alone: measured at batch 1, the correction (drafting ×0.70-0.81) overruled a
    drafting prediction on 268-302 of ≈ 400 steps at T = 0.7 (1.27x plain predicted) while drafting steps delivered
    1.33x plain steps' tokens/s (session 38)."""

    min_batch: int = LOADED_BATCH
    window: int = 16
    horizon: int = 64
    min_steps: int = 3  # fewer fresh steps of either action: no correction
    clock: int = 0
    steps: dict[tuple[int, bool], deque] = field(default_factory=dict)  # (batch, drafting) → (step, tokens, pred)

    def tick(self) -> None:
        self.clock += 1

    def record(self, batch: int, drafting: bool, tokens: int, predicted_rate: float, seconds: float) -> None:
        if batch < self.min_batch:
            return
        key = (batch, drafting)
        self.steps.setdefault(key, deque(maxlen=self.window)).append((self.clock, tokens, predicted_rate * seconds))

    def _fresh(self, batch: int, drafting: bool) -> list[tuple[int, int, float]]:
        return [s for s in self.steps.get((batch, drafting), ()) if self.clock - s[0] <= self.horizon]

    def _factor(self, batch: int, drafting: bool) -> float | None:
        got = self._fresh(batch, drafting)
        if len(got) < self.min_steps:
            return None
        return sum(s[1] for s in got) / max(sum(s[2] for s in got), 1e-12)

    def factors(self, batch: int) -> tuple[float, float]:
        """(drafting, plain): realised over predicted; (1, 1) unless both were measured lately."""
        draft, plain = self._factor(batch, True), self._factor(batch, False)
        return (draft, plain) if draft is not None and plain is not None else (1.0, 1.0)

    def lacks_plain(self, batch: int) -> bool:
        """Drafting has recent outcomes at this batch size and plain steps too few to compare them with: the
        correction is blind until a few plain steps run here (measured at 32 concurrent requests, where the policy
        drafted on 94-95 % of steps: the correction applied on 0 % of them, and the tree default served 0.90x
        plain; session 33)."""
        return len(self._fresh(batch, True)) >= self.min_steps > len(self._fresh(batch, False))

    def active(self, batch: int) -> bool:
        """Whether both actions have recent outcomes at this batch size (``factors`` is not the (1, 1) default)."""
        return self._factor(batch, True) is not None and self._factor(batch, False) is not None


@dataclass
class Regimes:
    """Each action's delivered tokens per row-second, by power-of-two batch bucket, compared directly — and a
    measured loss bans drafting in that bucket for a while that doubles with each repeat (``banned``).

    Why, beside ``Realised``: at high load both actions can miss their predictions by the same factor (measured
    at 32 concurrent requests: both ≈ 0.75–0.8), so comparing each with its own prediction cancels out and keeps
    a losing action; and a policy whose evidence fades by design tries drafting again every horizon, each try a
    step of several plain steps' cost (session 35: a batch-32 drafting step took 1.4 s and returned 88 tokens
    against a plain step's 32 in 0.27 s; a policy drafting on 2-4 % of steps served 0.87-0.90x all-plain). A ban
    doubling from ``horizon`` steps bounds that exploration to a vanishing share of a long run, and one measured
    win clears it. One-sided on purpose: a rate comparison only vetoes drafting, never forces it.

    Per row-second: the batch size moves within a bucket as requests finish, and at a fixed bucket a step's time
    scales with its rows at high load. ``min_steps`` drafting steps are needed before a loss is judged, one at
    ``decisive_batch`` rows or more when it delivered under ``decisive`` of plain's rate (many rows average out
    acceptance luck within a step; a single row's all-rejected draft is ordinary).

    From ``min_batch`` rows the judgement is class-blind (many rows of both classes share every step). Below it
    each request class (greedy, sampled) is judged on the drafting steps its rows drafted in, against the plain
    steps of the bucket, and banned alone: measured at batch 1 with mixed temperatures, a class-blind ban let the
    policy draft on 11-20 % of steps and serve 1.00-1.15x plain where greedy drafting every step served
    1.28-1.34x (session 36) — while with no judgement at all, where drafting loses for every class (int4 plain steps
    of 23 ms against 69 ms drafting steps returning 2.05 tokens), the fading priors retried drafting on 9 % of
    steps at batch 1 and 6 % at batch 4 and served 0.92x and 0.85x plain (session 47). ``small_min_steps``: a
    small batch's steps are few requests' luck, so more of them are needed; ``small_horizon``: the fading priors
    retry a paused class every 10-20 steps, so its tries span more than ``horizon`` steps and would never be judged
    within it (session 47: 51 drafting steps of 703 at batch 1, none judged)."""

    min_batch: int = LOADED_BATCH
    window: int = 16
    horizon: int = 64
    min_steps: int = 3
    small_min_steps: int = 4
    small_horizon: int = 512  # a class's drafting steps at a small batch count this long: its tries are sparse
    decisive: float = 0.6
    decisive_batch: int = LOADED_BATCH
    max_doublings: int = 6
    clock: int = 0
    # (bucket, class, drafting) → (step, tokens, row-s); class: None (class-blind, and every plain step) or sampled
    steps: dict[tuple[int, bool | None, bool], deque] = field(default_factory=dict)
    bans: dict[tuple[int, bool | None], tuple[int, int]] = field(default_factory=dict)  # → (until step, doublings)

    def tick(self) -> None:
        self.clock += 1

    def rate(self, bucket: int, drafting: bool, cls: bool | None = None) -> tuple[float, int] | None:
        """(tokens per row-second, steps) over the fresh steps of one action (and class) in a bucket; None if none."""
        horizon = self.horizon if cls is None else self.small_horizon
        got = [s for s in self.steps.get((bucket, cls, drafting), ()) if self.clock - s[0] <= horizon]
        return (sum(s[1] for s in got) / max(sum(s[2] for s in got), 1e-12), len(got)) if got else None

    def record(
        self, batch: int, drafting: bool, tokens: int, seconds: float, classes: frozenset[bool] = frozenset()
    ) -> None:
        """One step's outcome; ``classes``: the classes (sampled or not) of the rows that drafted in it, which a
        drafting step below ``min_batch`` is judged under (none given: it is not judged)."""
        bucket = size_bucket(batch)
        keys: list[bool | None] = [None] if batch >= self.min_batch or not drafting else sorted(classes)
        for cls in keys:
            self.steps.setdefault((bucket, cls, drafting), deque(maxlen=self.window)).append(
                (self.clock, tokens, seconds * batch)
            )
            if drafting:
                self._judge(bucket, cls, batch)

    def _judge(self, bucket: int, cls: bool | None, batch: int) -> None:
        draft, plain = self.rate(bucket, True, cls), self.rate(bucket, False)
        if draft is None or plain is None:
            return
        (d_rate, d_steps), p_rate = draft, plain[0]
        needed = self.min_steps if cls is None else self.small_min_steps
        enough = d_steps >= needed or (batch >= self.decisive_batch and d_rate < self.decisive * p_rate)
        if not enough:
            return
        doublings = self.bans.get((bucket, cls), (0, -1))[1]
        if d_rate < p_rate:
            doublings = min(doublings + 1, self.max_doublings)
            self.bans[(bucket, cls)] = (self.clock + self.horizon * 2**doublings, doublings)
            self.steps.pop((bucket, cls, True), None)  # the next try is judged on its own steps
        else:
            self.bans.pop((bucket, cls), None)

    def banned(self, batch: int, sampled: bool | None = None) -> bool:
        """Whether drafting is banned at this batch size: for every row from ``min_batch``, else for the rows
        of the class ``sampled`` (None: no class, not banned). Below ``min_batch`` a class banned at fewer rows is
        banned here too: a wide verify costs relatively more as the batch grows (a 16-node tree's verify 3.0x a plain
        step at 1 row, 3.6-3.8x at 2-4 rows; session 47), so a loss at fewer rows is a loss here, and each small
        bucket need not pay for its own tries."""
        if batch >= self.min_batch:
            return self.bans.get((size_bucket(batch), None), (0, 0))[0] > self.clock
        if sampled is None:
            return False
        return any(self.bans.get((b, sampled), (0, 0))[0] > self.clock for b in range(size_bucket(batch) + 1))
