"""Speculation that adapts to load (the server's default): per engine step, how many tokens each running
request drafts — down to none, a plain step, when drafting would lower throughput.

Why one width per step: the verify pass is one rectangular forward ``[batch, W + 1]``, so a row drafting
fewer than W tokens would save nothing there; what a row can save is the drafter's own work. Each row
therefore drafts W tokens or none (a paused row's W verify slots are padding and its position 0 is exactly
a plain step's). Over the widths W = 1…n and the number k of drafting rows — the k with the best recent
acceptance, since every cost depends on k alone — the plan maximises the predicted tokens per second:

    value(W, k) = (b + Σ_{k best rows} E_i(W)) / (cost(b, W + 1) + extra_draft(k))
    value(0)    =  b                           / (cost(b, 1)     + extra_plain(b))
    E_i(W)      = min(ρ_i · g(W), W)

- ``cost``: the target's verify time for b rows × (W + 1) tokens, the curve measured when the policy starts
  (``CostModel``): at high load a wider verify costs about as much per token as a plain step, so drafts
  must return more than they add, and at batch 1 it is nearly flat, so every draft is almost free;
- ``g(W)``: expected accepted drafts at width W, from the realised per-position (tree: per-rank) rates
  (``AdaptiveWidth.curve``) of the request's *class*: greedy (T = 0) and sampled (T > 0) requests keep
  separate curves, since a draft's acceptance differs several-fold between them and a mixed workload would
  otherwise hand each the other's average. The curve's evidence decays (``memory`` per drafting step) and,
  below a loaded batch, fades while the class is paused (``fade``), so the Laplace prior (½ a position:
  optimistic) returns and the class is tried again: a few unlucky drafts cannot pause a class for good. At a
  loaded batch nothing fades (a try is dear there, and a pause speaks of the load) and a tree's prior is the
  cautious ½, ¼, … by rank;
- ``ρ_i``: the request's recent acceptance relative to g — decayed sums of its accepted drafts and of g at
  the widths it verified, starting at 1 (as good as its class); while it is paused below a loaded batch the
  evidence fades back to 1, so a request that once drafted badly is tried again;
- ``cost`` is corrected by what verify passes measured lately (``VerifyScale``: the curve was timed on
  short contexts), and ``extra`` is the measured wall time of a step beyond its verify pass (the drafter, the
  proposal, the bookkeeping), by rows (``Overheads``); both are medians of recent steps, forgotten after a
  horizon so an action the policy stopped taking is measured again. Drafting must beat the plain step by
  ``margin``, since a wrong "draft" costs a whole wide verify and a wrong "plain" only a few tokens;
- from a loaded batch (``LOADED_BATCH`` rows), outcomes overrule predictions twice: each action's delivered
  tokens/s against its own prediction
  (``Realised``), and drafting's delivered tokens per row-second against plain steps' in the same batch-size
  bucket (``Regimes``): a measured loss bans drafting there for ``horizon`` steps, doubled at each repeat, so
  re-trying a losing action at high load costs a vanishing share of a long run;
- below a loaded batch the same ban applies per request class (greedy, sampled), judged on the drafting steps that
  class's rows drafted in: where a wide verify costs several plain steps even at batch 1 (a 4-bit target's plain
  steps), the fading priors would otherwise retry drafting every 10-20 steps at a loss.

Lossless: the plan reads only past outcomes and measured times, never the target's current logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lilicorr.decoding.adaptive import AdaptiveWidth, CostModel, DeferredFusing
from lilicorr.decoding.policy_estimates import LOADED_BATCH, Overheads, Realised, Regimes, VerifyScale, size_bucket
from lilicorr.decoding.proposal import Proposal
from lilicorr.decoding.verify import Verdict, Verifier

# Why a step ran plain, as ``StepPlan.reason`` and ``/metrics`` name it: the rows' and classes' own estimates chose
# it ("predicted"), or a rule of ``LoadPolicy.plan`` overruled a drafting plan (the first that applies, in this
# order; "losing": the outcome correction). Which pauses fade the evidence is the batch size's call, not the reason's
# (``LoadPolicy.record``).
PLAIN_REASONS = ("predicted", "banned", "unmeasured", "blind", "losing")


@dataclass
class RowAcceptance:
    """One request's recent acceptance relative to the engine-wide curve; lives (and dies) with its row."""

    accepted: float = 0.0  # decayed sum of accepted drafts
    expected: float = 0.0  # decayed sum of g(W) at the widths it verified
    sampled: bool = False  # the request samples (T > 0): it reads and feeds the sampled class's curve

    def rho(self, prior: float) -> float:
        return (self.accepted + prior) / (self.expected + prior)


@dataclass
class StepPlan:
    """One step's decision: the verify width and the rows that draft (none: a plain step)."""

    batch: int
    width: int  # W: draft tokens per drafting row (0: a plain step)
    rows: list[int]  # drafting rows, ascending
    value: float  # predicted tokens per second of this plan
    plain_value: float  # … of a plain step
    draft_factor: float = 1.0  # the outcome corrections the decision used (``Realised``): drafting's …
    plain_factor: float = 1.0  # … and plain steps'
    corrected: bool = False  # both actions had recent outcomes at this batch size, so the factors applied
    reason: str = ""  # why a plain step: "predicted" (the predictions chose it) or the rule (``PLAIN_REASONS``)

    @property
    def overruled(self) -> bool:
        """The predictions chose drafting and a rule of ``LoadPolicy.plan`` made the step plain."""
        return self.reason not in ("", "predicted")

    @property
    def draft_tokens(self) -> int:
        return self.width * len(self.rows)


def plan_step(
    gains: torch.Tensor,
    cost: Callable[[int, int], float],
    extra_draft: list[float],
    extra_plain: float,
    margin: float = 0.05,
) -> StepPlan:
    """The decision, pure: ``gains [b, n + 1]`` expected accepted drafts of each row at each width (column 0
    is 0), ``extra_draft[k − 1]`` seconds a step with k drafting rows spends beyond its verify, and
    ``extra_plain`` a plain step's."""
    b, n1 = gains.shape
    plain = b / max(cost(b, 1) + extra_plain, 1e-12)
    if n1 < 2 or b == 0:
        return StepPlan(b, 0, [], plain, plain)
    best = gains[:, 1:].sort(0, descending=True).values.cumsum(0)  # [b, n]: Σ of the k best rows at width W
    verify = torch.tensor([cost(b, w + 1) for w in range(1, n1)], dtype=torch.float64)  # [n]
    extra = torch.tensor(extra_draft[:b], dtype=torch.float64)[:, None]  # [b, 1]
    value = (b + best) / (verify[None] + extra).clamp_min(1e-12)  # [k, W]
    flat = int(value.argmax())  # ties: the fewest rows, then the narrowest width
    k, width = flat // (n1 - 1) + 1, flat % (n1 - 1) + 1
    top = float(value.flatten()[flat])
    if top <= plain * (1.0 + margin):
        return StepPlan(b, 0, [], top, plain)
    rows = sorted(gains[:, width].argsort(descending=True, stable=True)[:k].tolist())
    return StepPlan(b, width, rows, top, plain)


@dataclass
class LoadPolicy:
    """Plans each step (``plan``) and learns from it (``record``); ``last`` is what ``/metrics`` shows."""

    n: int  # the proposer's width: chain tokens or tree nodes
    cost: CostModel
    tree: bool = False
    margin: float = 0.05
    prior: float = 1.0  # weight of ρ's prior, in expected accepted drafts
    decay: float = 0.7  # per drafting step: "recent" is the last few steps
    fade: float = 0.95  # per paused step below a loaded batch: evidence fades back towards the prior
    memory: float = 0.99  # per drafting step of a class: its curve weighs the last ~100 steps
    calib: AdaptiveWidth = field(init=False)  # the greedy class's curve
    calib_sampled: AdaptiveWidth = field(init=False)  # the sampled class's curve
    extra_draft: Overheads = field(default_factory=Overheads)
    extra_plain: Overheads = field(default_factory=Overheads)
    verify_scale: VerifyScale = field(default_factory=VerifyScale)
    realised: Realised = field(default_factory=Realised)
    regimes: Regimes = field(default_factory=Regimes)
    last: StepPlan | None = None
    # the drafter's catch-up on plain steps' taps, moved from the drafting step that runs it to the plain steps
    deferred: DeferredFusing = field(default_factory=DeferredFusing)

    def __post_init__(self) -> None:
        self.calib = AdaptiveWidth(self.n, self.cost, tree=self.tree)
        self.calib_sampled = AdaptiveWidth(self.n, self.cost, tree=self.tree)

    def curve_of(self, sampled: bool) -> AdaptiveWidth:
        """The curve of a class of requests: greedy (``calib``) or sampled (``calib_sampled``)."""
        return self.calib_sampled if sampled else self.calib

    def curves(self, batch: int) -> dict[bool, torch.Tensor]:
        """g of each class (sampled or not) at this batch size: ``[n + 1]`` each; at high load (``LOADED_BATCH``
        rows) with the tree's cautious prior (``AdaptiveWidth.curve``), where a try is dear."""
        return {c: self.curve_of(c).curve(batch < LOADED_BATCH) for c in (False, True)}

    def gains(self, rows: list[RowAcceptance]) -> torch.Tensor:
        """``[b, n + 1]``: E_i(W) = min(ρ_i · g_class(i)(W), W)."""
        curves = self.curves(len(rows))
        g = torch.stack([curves[r.sampled] for r in rows]) if rows else torch.zeros(0, self.n + 1)  # [b, n + 1]
        rho = torch.tensor([r.rho(self.prior) for r in rows], dtype=torch.float64)  # [b]
        return torch.minimum(rho[:, None] * g, torch.arange(self.n + 1, dtype=torch.float64)[None])

    def verify_cost(self, batch: int, width: int) -> float:
        """The start-up cost curve scaled by what verify passes of this batch and kind measured lately."""
        return self.cost(batch, width) * self.verify_scale(batch, width > 1)

    def plan(self, rows: list[RowAcceptance]) -> StepPlan:
        """The best drafting plan against a plain step, each predicted value scaled by how its action's steps
        at this batch size delivered against their predictions lately (``Realised``). A correction lasts until
        its evidence is ``horizon`` steps old, so the losing action is tried again now and then. A batch size
        whose plain verify has not been timed lately takes one plain step first: its value would otherwise rest
        on a scale borrowed from another batch size (measured: ×1.45 from batch 4 made batch-1 plain steps look
        44 ms instead of the 35 measured, and the policy drafted there at a loss), and only a plain step corrects it; a
        drafting estimate needs no such step, since a forgotten overhead reads 0 and drafting gets tried. Likewise a
        batch size whose drafting steps have outcomes and whose plain steps have too few (``Realised.lacks_plain``)
        takes plain steps until the correction can compare: at most ``min_steps`` in a ``horizon``."""
        b = len(rows)
        # drafting delivered less than plain steps here lately (``Regimes``): for every row at a loaded batch, for
        # one request class below it; the others plan as if the banned rows could not draft
        banned = [i for i, r in enumerate(rows) if self.regimes.banned(b, r.sampled)]
        if b and len(banned) == b:  # nothing may draft: a plain step without planning one (its cost is per step)
            plain = b / max(self.verify_cost(b, 1) + self.extra_plain(b), 1e-12)
            self.last = StepPlan(b, 0, [], 0.0, plain, *self.realised.factors(b), corrected=True, reason="banned")
            return self.last
        extra, extra_plain = self.extra_draft.upto(b), self.extra_plain(b)
        gains = self.gains(rows)
        scale = {True: self.verify_scale(b, True), False: self.verify_scale(b, False)}  # read once a step

        def verify(batch: int, width: int) -> float:  # ``verify_cost`` at this step's batch
            return self.cost(batch, width) * scale[width > 1]

        raw = plan_step(gains, verify, extra, extra_plain, margin=-1.0)
        best, allowed = raw, gains
        if banned and raw.width:
            allowed = gains.clone()
            allowed[banned] = 0.0
            best = plan_step(allowed, verify, extra, extra_plain, margin=-1.0)
        draft_k, plain_k = self.realised.factors(b)
        unmeasured = not self.extra_plain.fresh(size_bucket(b))  # no plain step of this size lately: a borrowed value
        blind = self.realised.lacks_plain(b)  # drafting's outcomes have nothing to be compared with here
        predicted_plain = raw.value <= raw.plain_value * (1.0 + self.margin)  # the rows' own estimates say pause

        def loses(plan: StepPlan) -> bool:
            return plan.value * draft_k <= plan.plain_value * plain_k * (1.0 + self.margin)

        losing = loses(best)
        # vetoed: every row that could draft is banned, or what remains would draft rows that expect nothing
        vetoed = best is not raw and (not best.width or float(allowed[best.rows, best.width].sum()) <= 0.0)
        rules = {"banned": vetoed, "unmeasured": unmeasured, "blind": blind, "losing": losing}
        rule = next((name for name, applies in rules.items() if applies), None)
        if not raw.width or (predicted_plain and loses(raw)):  # corrected or not, plain: the rows' own pause
            best = StepPlan(b, 0, [], raw.value, raw.plain_value, reason="predicted")
        elif rule:
            best = StepPlan(b, 0, [], raw.value, raw.plain_value, reason=rule)  # values: the raw predictions
        best.draft_factor, best.plain_factor = draft_k, plain_k
        best.corrected = self.realised.active(b) or bool(banned)
        self.last = best
        return best

    def record(
        self,
        plan: StepPlan,
        rows: list[RowAcceptance],
        paths: list[list[int]],
        seconds: float,
        verify_seconds: float | None = None,
        deferred_seconds: float = 0.0,
        deferred_taps: int = 0,
    ) -> None:
        """After the step: ``paths`` the drafting rows' accepted verify positions (in ``plan.rows`` order),
        ``seconds`` the step's wall time, ``verify_seconds`` its verify pass's (None: as predicted),
        ``deferred_seconds`` what a drafting step spent fusing ``deferred_taps`` taps of the plain steps before it. The
        verify's own time goes to ``verify_scale`` and only the rest to the overheads, so a cost curve that is
        off at this size is not charged to the drafter; nor is the plain steps' deferred fusing."""
        b, w = plan.batch, plan.width
        for clock in (self.extra_draft, self.extra_plain, self.verify_scale, self.realised, self.regimes):
            clock.tick()
        if w:
            self.deferred.record(deferred_seconds, deferred_taps)
        # the step's own cost: a drafting step without the plain steps' fusing, a plain step with its share of it
        seconds = seconds - deferred_seconds if w else seconds + self.deferred.share(b)
        predicted = plan.value if w else plan.plain_value
        tokens = b + sum(len(p) - 1 for p in paths)
        self.realised.record(b, w > 0, tokens, predicted, seconds)
        self.regimes.record(b, w > 0, tokens, seconds, frozenset(rows[i].sampled for i in plan.rows))
        if verify_seconds is not None:
            self.verify_scale.record(b, w > 0, verify_seconds / max(self.cost(b, w + 1), 1e-12))
        verify = self.verify_cost(b, w + 1) if verify_seconds is None else verify_seconds
        drafting = set(plan.rows)
        # Evidence fades while rows are paused (a plain step, or left out of a drafting one) below a loaded batch,
        # where a try costs about a plain step: that is
        # what lets a row paused by a few unlucky drafts draft again. At a loaded batch a try is dear and a pause
        # mostly speaks of the load: fading there brought the optimistic prior back while 8 rows stayed plain for
        # long, and a step at 7 rows drafted a whole tree on it (predicted 50.7 tokens, got 17, in 2.6 plain steps'
        # time; session 37). Session 37's fix stopped the fade at every batch size (all plain steps counted as
        # forced): a batch-1 row at T = 0.7 then kept a ρ of ≈ 0.6 through plain runs of up to 41 steps and drafted
        # on 12-21 % of steps where drafting every step served 1.24-1.27x plain (session 38).
        paused = [r for i, r in enumerate(rows) if i not in drafting] if b < LOADED_BATCH else []
        for r in paused:
            r.accepted, r.expected = self.fade * r.accepted, self.fade * r.expected
        for sampled in {r.sampled for r in paused} - {rows[i].sampled for i in drafting}:
            self.curve_of(sampled).scale(self.fade)  # a paused class: back towards the prior
        if not w:
            self.extra_plain.record(b, seconds - verify)
            return
        self.extra_draft.record(len(plan.rows), seconds - verify)
        g = {c: float(curve[w]) for c, curve in self.curves(b).items()}  # as ``gains`` read it for this plan
        by_class: dict[bool, list[list[int]]] = {}
        for i, path in zip(plan.rows, paths, strict=True):
            r = rows[i]
            r.accepted = self.decay * r.accepted + len(path) - 1
            r.expected = self.decay * r.expected + g[r.sampled]
            by_class.setdefault(r.sampled, []).append(path)
        for sampled, class_paths in by_class.items():
            curve = self.curve_of(sampled)
            curve.scale(self.memory)
            curve.update(torch.ones(len(class_paths), self.n), class_paths, w)


def widen(proposal: Proposal, rows: list[int], pending: torch.Tensor) -> Proposal:
    """The drafting rows' proposal ``[k, W]`` widened to the whole batch ``[batch, W]`` for the one verify
    pass: a paused row's slots repeat its pending token as a chain (in a tree too). Causal attention keeps
    its position 0 blind to them, and only position 0 of a paused row is read."""
    b, w = len(pending), proposal.tokens.shape[1]
    tokens = pending[:, None].expand(b, w).clone()  # [batch, W]
    tokens[rows] = proposal.tokens
    if not proposal.is_tree:
        return Proposal(tokens=tokens)
    parents = torch.arange(w).expand(b, w).clone()  # [batch, W]: a chain
    parents[rows] = proposal.parents
    return Proposal(tokens=tokens, parents=parents)


def verify_rows(
    verifier: Verifier, proposal: Proposal | None, rows: list[int] | None, logits: torch.Tensor, requests: list
) -> list[Verdict]:
    """Verdicts for every row: ``rows`` (None: all) against their drafts ``proposal [k, W]``, the others as
    plain steps from their verify position 0, which saw exactly what a plain step's does."""
    if rows is None or proposal is None:
        return verifier.verify(proposal, logits, requests)
    chosen = set(rows)
    others = [i for i in range(len(requests)) if i not in chosen]
    verdicts: dict[int, Verdict] = {}
    for idx, prop in ((rows, proposal), (others, None)):
        if idx:
            verdicts.update(zip(idx, verifier.verify(prop, logits[idx], [requests[i] for i in idx]), strict=True))
    return [verdicts[i] for i in range(len(requests))]
