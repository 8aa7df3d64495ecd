"""Adaptive verification (vLLM's ``enable_adaptive_verification``): draft the whole block (or tree), but
send to the target only the prefix whose expected accepted tokens pay for its verify cost.

Per step and batch, the width ``W`` (0…n drafted tokens, or best-first tree nodes, per row) maximises

    Σ_rows (1 + E_row[accepted | W]) / (cost(batch, W + 1) + [W ≥ 1] · draft),
    chain: E[accepted | W] = Σ_{j≤W} Π_{m≤j} a_m      (a_m: acceptance of draft m given the ones before)
    tree:  E[accepted | W] = Σ_{j≤W} r_j              (r_j: probability that node j is on the accepted path)

— the accepted path of a tree is unique, so its expected length is the sum over nodes of the probability
of being on it; a best-first order puts parents before children, so every prefix is a tree. ``a_m`` and
``r_j`` are estimated from the proposer's own confidence (the drafter's probability of a chain token, a
node's path score), calibrated online per position or rank (realised rate, see ``AdaptiveWidth``);
``draft`` is the drafter's measured time per step and ``cost`` the target's measured verify time for that
batch size and width (``CostModel``, measured once when the engine starts). W = 0 is a plain AR step: at
high concurrency, when a wider verify costs more than the drafts return, the engine falls back towards AR
instead of losing to it. Lossless: W depends only on the drafter's outputs and on past outcomes, never on
the target's current logits, so verifying a prefix is just a shorter draft (or a smaller tree).
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field

import torch


@dataclass
class CostModel:
    """Verify time (seconds) of ``batch`` rows × ``width`` tokens. With measured ``points`` it interpolates
    linearly in ``batch · width`` between them (a CPU's cost curve is far from a line: flat up to a few
    tokens, then steeper) and extends the last segment's slope; without, ``base + per_token · batch · width``
    (the least-squares line, also what is reported)."""

    base: float
    per_token: float
    points: tuple[tuple[float, float], ...] = ()  # (batch · width, seconds), ascending, non-decreasing

    def __call__(self, batch: int, width: int) -> float:
        x = batch * width
        if not self.points:
            return self.base + self.per_token * x
        xs = [p[0] for p in self.points]
        i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1) if len(xs) > 1 else 0
        if i == 0:
            return self.points[0][1]
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        slope = max((y1 - y0) / max(x1 - x0, 1e-9), 0.0)
        return max(y0 + slope * (x - x0), self.points[0][1])

    @classmethod
    def measure(cls, target, width: int, batches: tuple[int, ...] = (1, 4), context: int = 64, reps: int = 2):
        """Time cached target forwards of 1, 2, 4, … ``width`` tokens after ``context`` tokens, at each batch
        size (best of ``reps``)."""
        widths = sorted({1, width} | {w for w in (2, 4, 8, 16, 32, 64) if w < width})
        by_x: dict[int, list[float]] = {}
        for b in batches:
            state = target.new_state(b)
            target.forward(state, torch.full((b, context), 5), want_taps=False)
            target.forward(state, torch.full((b, 1), 5), want_taps=False)  # warm-up
            target.truncate(state, state.lengths - 1)
            for w in widths:
                best = float("inf")
                for _ in range(reps):
                    t0 = time.perf_counter()
                    target.forward(state, torch.full((b, w), 5), want_taps=False)
                    best = min(best, time.perf_counter() - t0)
                    target.truncate(state, state.lengths - w)
                by_x.setdefault(b * w, []).append(best)
        points, top = [], 0.0
        for x in sorted(by_x):
            top = max(top, sum(by_x[x]) / len(by_x[x]))  # a cost curve never falls
            points.append((float(x), top))
        xt = torch.tensor([p[0] for p in points], dtype=torch.float64)
        yt = torch.tensor([p[1] for p in points], dtype=torch.float64)
        per = float(((xt - xt.mean()) * (yt - yt.mean())).sum() / ((xt - xt.mean()) ** 2).sum().clamp_min(1e-12))
        per = max(per, 0.0)
        return cls(base=max(float(yt.mean() - per * xt.mean()), 1e-6), per_token=per, points=tuple(points))


@dataclass
class AdaptiveWidth:
    """Chooses the verify width and keeps the per-position calibration (predicted vs realised).

    A weak drafter's probabilities are far below its real acceptance (flat softmax over a large
    vocabulary), so they are not used as probabilities: per position (a tree: per best-first rank) the
    engine keeps the realised rate over the steps that reached it (Laplace: starts at ½, optimistic, so
    every width gets tried) and the proposer's mean confidence there; a row's estimate is that rate scaled
    by how sure the proposer is of this token relative to its mean, capped at 1. A chain position is
    reached when every draft before it was accepted and counts as realised when it is accepted too; a
    tree node is reached whenever it is verified and realised when it lies on the accepted path."""

    n: int
    cost: CostModel
    tree: bool = False
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
        reach = self.acceptance(conf)  # [batch, n] tree: P(node j on the accepted path)
        if not self.tree:
            reach = reach.cumprod(1)  # chain: P(first j+1 drafts all accepted)
        return torch.cat([torch.zeros(conf.shape[0], 1, dtype=torch.float64), reach.cumsum(1)], 1)

    def curve(self, optimistic: bool = True) -> torch.Tensor:
        """Expected accepted drafts at each width 0…n for a row as sure as usual — the realised rates alone,
        so it is known before the drafter runs (the load policy decides then): ``[n + 1]``. ``optimistic``:
        the Laplace prior of ½ per position or node, so every width gets tried; else, for a tree, ½, ¼, … by
        rank, ≈ 1 accepted draft at any width like a chain's prior — what the load policy assumes at high load,
        where a try costs several plain steps (an unmeasured 15-node tree expected 7.5 drafts a row and the
        first steps at batch 17 and 32 drafted at 0.3–0.45x plain steps' rate, session 36). Evidence outweighs
        either prior after a few steps."""
        reached = torch.tensor(self.reached, dtype=torch.float64)
        prior = torch.full_like(reached, 0.5)
        if self.tree and not optimistic:
            prior = 0.5 ** torch.arange(1, self.n + 1, dtype=torch.float64)
        reach = (torch.tensor(self.realised, dtype=torch.float64) + 2.0 * prior) / (reached + 2.0)  # [n]
        if not self.tree:
            reach = reach.cumprod(0)  # chain: P(first j+1 drafts all accepted)
        return torch.cat([torch.zeros(1, dtype=torch.float64), reach.cumsum(0)])

    def choose(self, conf: torch.Tensor, draft_cost: float = 0.0) -> int:
        """The width with the most tokens per second; a drafting step also pays ``draft_cost`` (seconds, the
        drafter's measured time per step), so W = 0 — an AR step, after which the engine pauses drafting —
        wins whenever the drafts do not pay for the drafter too."""
        b, n = conf.shape
        gain = (1.0 + self.expected(conf)).sum(0)  # [n + 1]: tokens per step over the batch, per width
        value = torch.stack([gain[w] / (self.cost(b, w + 1) + (draft_cost if w else 0.0)) for w in range(n + 1)])
        return int(value.argmax())

    def update(self, conf: torch.Tensor, paths: list[list[int]], width: int) -> None:
        """Per row, from its accepted path (verify positions, 0 = the pending token): every position or
        node it reached gets reached += 1, predicted += confidence, realised += on the path."""
        b, n = conf.shape
        pos = torch.arange(n)[None]  # [1, n]
        # a tree node is reached whenever verified; a chain position one past its accepted prefix at most
        ends = torch.tensor([width if self.tree else min(width, len(p)) for p in paths])[:, None]
        reached = pos < ends  # [batch, n]
        on_path = torch.zeros(b, n + 1, dtype=torch.bool)
        for row, path in enumerate(paths):
            on_path[row, path] = True
        on_path = on_path[:, 1:] & reached  # [batch, n]: node / position j is verify position j + 1
        for acc, add in ((self.reached, reached), (self.predicted, conf.double() * reached), (self.realised, on_path)):
            for j, v in enumerate(add.sum(0).tolist()):
                acc[j] += float(v)

    def scale(self, factor: float) -> None:
        """Weigh the evidence down by ``factor`` (the Laplace prior keeps its weight): recent steps count more."""
        for acc in (self.reached, self.predicted, self.realised):
            acc[:] = [factor * v for v in acc]

    def calibration(self) -> list[dict]:
        """Per position (tree: rank): steps that reached it, the mean confidence there, realised acceptance."""
        return [
            {
                "rank" if self.tree else "position": j + 1,
                "reached": int(r),
                "mean_probability": round(p / r, 4) if r else None,
                "realised": round(a / r, 4) if r else None,
            }
            for j, (r, p, a) in enumerate(zip(self.reached, self.predicted, self.realised, strict=True))
        ]


@dataclass
class DeferredFusing:
    """What the drafter's catch-up on plain steps' taps costs, per tap (a running mean): the gate and the load policy
    both move that time from the drafting step that runs it to the plain steps that left the taps waiting
    (``DraftSide.fuse_deferred``). Per tap, since a plain step of b rows defers b of them and one batched fusion of
    many costs less per tap than of few — the mean is what the pauses actually taken cost."""

    smoothing: float = 0.3  # weight of the newest fusion
    per_tap: float = 0.0

    def record(self, seconds: float, taps: int) -> None:
        """A drafting step fused ``taps`` waiting taps in ``seconds`` (none waiting: nothing learnt)."""
        if taps:
            new, a = seconds / taps, self.smoothing
            self.per_tap = (1 - a) * self.per_tap + a * new if self.per_tap else new

    def share(self, rows: int) -> float:
        """Seconds of later fusing a plain step of ``rows`` rows leaves behind."""
        return rows * self.per_tap


@dataclass
class DraftGate:
    """Whether the next step runs the drafter at all, from the throughput the engine actually gets.

    ``AdaptiveWidth`` picks a width from predictions (calibrated confidence, a cost curve measured once),
    and it can only choose W = 0 after the drafter has run: where the drafter's own pass costs more than
    its accepted tokens return (a weak drafter on a CPU), every drafting step loses to a plain one. The
    gate reads what was measured: running means of tokens and seconds of drafting steps and of plain steps.

    - A drafting step that returned at least the break-even count (the tokens plain steps return in a
      drafting step's time) is followed by another: acceptance comes in runs, so the step after a good one
      is good too (SmolLM2's DFlash, 24 prompts, T = 0, one logged run: 4.2 tokens on average after a step of
      more than 3 against 2.3 after one of at most 3). So is a poor one while drafting pays on average.
    - Otherwise drafting pauses, for as many plain steps as keep the probes' expected loss to ``probe_budget``
      of the plain time (loss = a drafting step's time − its mean tokens × a plain token's time): a drafter
      near break-even is probed every few steps and catches its next run of easy text; one far below it waits
      up to ``max_pause`` steps. (The rule before this one doubled the pause after every losing probe: near
      break-even it settled at 64-step pauses and missed the runs — on that machine DFlash's 8-node tree
      drafting every step ran 1.40× plain decoding, behind that rule 1.21×.)
    - When only the width rule said "no drafts this step", pauses double up to ``unsure_pause``.
    - The drafter's context catches up on the paused steps' taps in the next drafting step (``DraftSide.
      fuse_deferred``): that time is the plain steps' (``deferred_s``), not the probe's — charged to the probe
      it made every probe after a long pause look slower still.

    A plain step is forced once at the start and after every ``max_pause`` drafting steps, so the plain rate
    is never missing or stale. Lossless by construction: it decides only whether a step drafts, never what
    is accepted."""

    max_pause: int = 64
    unsure_pause: int = 8
    probe_budget: float = 0.02  # the share of plain time the probes of a losing drafter may cost
    smoothing: float = 0.3  # weight of the newest step in the running means
    skip: int = 0  # plain steps left before the drafter runs again
    backoff: int = 0  # length of the latest pause
    since_plain: int = 0  # drafting steps since the last plain one
    deferred: DeferredFusing = field(init=False)  # the catch-up on paused steps' taps, charged to them
    # running means [tokens, seconds] of drafting / plain steps, per batch-size bucket (1, 2–3, 4–7, …): a
    # server's batch changes as requests come and go, and a rate is only comparable at the same size
    drafted: dict[int, list[float]] = field(default_factory=dict)
    plain: dict[int, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.deferred = DeferredFusing(self.smoothing)

    def new_text(self) -> None:
        """New prompts on an idle engine: end the pause, so their text is probed at once. How well a drafter does
        changes from prompt to prompt far more than within one (code against prose), and a pause set by the last
        prompt's probes kept whole prompts from drafting at all."""
        self.skip = self.backoff = 0

    def should_draft(self) -> bool:
        """False: run this step without the drafter (one plain target step)."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    @staticmethod
    def _bucket(batch: int) -> int:
        return 1 << (max(batch, 1).bit_length() - 1)

    def _mean(self, means: dict[int, list[float]], batch: int, tokens: int, seconds: float) -> None:
        acc = means.setdefault(self._bucket(batch), [])
        if not acc:
            acc.extend([float(tokens), seconds])
            return
        a = self.smoothing
        acc[0], acc[1] = (1 - a) * acc[0] + a * tokens, (1 - a) * acc[1] + a * seconds

    def rate(self, drafted: bool, batch: int = 1) -> float | None:
        """Tokens per second of drafting (or plain) steps at this batch size, None before the first one."""
        acc = (self.drafted if drafted else self.plain).get(self._bucket(batch))
        return acc[0] / max(acc[1], 1e-9) if acc else None

    def record(
        self,
        drafted: bool,
        seconds: float,
        tokens: int,
        chose_none: bool = False,
        batch: int = 1,
        deferred_s: float = 0.0,
        deferred_taps: int = 0,
    ) -> None:
        """One finished step: did the drafter run, its wall time, tokens emitted over the batch, whether
        the width rule chose no drafts after all, the batch size, and (a drafting step) the seconds it spent
        fusing the ``deferred_taps`` taps of the plain steps before it."""
        if not drafted:
            self._mean(self.plain, batch, tokens, seconds + self.deferred.share(batch))
            self.since_plain = 0
            return
        self.deferred.record(deferred_s, deferred_taps)
        self._mean(self.drafted, batch, tokens, seconds - deferred_s)
        self.since_plain += 1
        plain, spec = self.plain.get(self._bucket(batch)), self.drafted[self._bucket(batch)]
        if chose_none:
            self.backoff = min(2 * self.backoff or 1, self.unsure_pause)
            self.skip = self.backoff
            return
        if plain is None:
            self.backoff, self.skip = 0, 1  # measure the plain rate
            return
        plain_token_s = plain[1] / max(plain[0], 1e-9)  # seconds a plain step takes per token
        breakeven = spec[1] / max(plain_token_s, 1e-12)  # tokens plain steps return in a drafting step's time
        if tokens >= breakeven or spec[0] >= breakeven:
            self.backoff = 0
            if self.since_plain >= self.max_pause:
                self.skip = 1  # refresh the plain rate
            return
        loss = spec[1] - spec[0] * plain_token_s  # what a probe costs beyond plain steps' time for its tokens
        self.backoff = max(1, min(self.max_pause, math.ceil(loss / (self.probe_budget * plain[1]))))
        self.skip = self.backoff
