"""The load policy (``decoding/policy.py``): its decisions on scripted costs, what it learns from outcomes, and
losslessness while it really varies the width and the drafting rows (greedy identity under batching, the exact
sampling distribution)."""

import itertools

import pytest
import torch

from lilicorr.decoding.adaptive import CostModel
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.policy import PLAIN_REASONS, LoadPolicy, RowAcceptance, StepPlan, plan_step
from lilicorr.decoding.policy_estimates import Overheads, Realised, Regimes, size_bucket
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_adaptive import _joint_counts
from tests.decoding.test_engine_greedy import MAX_TOKENS, _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value

# a CPU-like verify curve: flat up to 16 tokens a pass, then every token costs what it costs alone (1 ms)
CPU = CostModel(base=0.0, per_token=0.0, points=((1.0, 0.016), (16.0, 0.016), (64.0, 0.064)))


def _gains(rates: list[float], n: int) -> torch.Tensor:
    """``[b, n + 1]`` expected accepted drafts of chains whose tokens are each accepted with ``rate``."""
    a = torch.tensor(rates, dtype=torch.float64)[:, None] ** torch.arange(1, n + 1)[None]  # [b, n]
    return torch.cat([torch.zeros(len(rates), 1, dtype=torch.float64), a.cumsum(1)], 1)


def test_batch_one_high_acceptance_drafts_the_full_length():
    plan = plan_step(_gains([0.9], 15), CPU, extra_draft=[0.002], extra_plain=0.0)
    assert plan.width == 15 and plan.rows == [0] and plan.value > plan.plain_value


def test_high_batch_low_acceptance_is_a_plain_step():
    plan = plan_step(_gains([0.3] * 32, 15), CPU, extra_draft=[0.0005 * k for k in range(1, 33)], extra_plain=0.0)
    assert plan.width == 0 and plan.rows == [] and plan.draft_tokens == 0


def test_width_shrinks_with_load_and_comes_back_when_the_batch_shrinks():
    widths = [plan_step(_gains([0.7] * b, 15), CPU, [0.001] * b, 0.0).width for b in (1, 2, 4, 8, 16, 32)]
    assert widths[0] == 15 and widths[-1] == 0
    assert all(a >= b for a, b in zip(widths, widths[1:], strict=False)), widths  # never wider under more load
    assert plan_step(_gains([0.7], 15), CPU, [0.001], 0.0).width == 15  # one request left: full length again


def test_rows_that_do_not_pay_for_their_drafter_pause():
    """A drafter costing 2 ms a row: the two sure rows draft, the two that are almost never right do not."""
    plan = plan_step(_gains([0.9, 0.05, 0.9, 0.05], 3), CPU, [0.002 * k for k in range(1, 5)], 0.0)
    assert plan.rows == [0, 2] and plan.width >= 1


def test_a_marginal_gain_stays_plain():
    """Drafting predicted 3 % faster than a plain step is below the 5 % margin: a plain step."""
    gains = torch.tensor([[0.0, 0.03]], dtype=torch.float64)
    flat = CostModel(base=1.0, per_token=0.0)
    assert plan_step(gains, flat, [0.0], 0.0).width == 0
    assert plan_step(gains, flat, [0.0], 0.0, margin=0.0).width == 1


def test_row_acceptance_is_learnt_and_fades_back_while_paused():
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance(), RowAcceptance()]
    for _ in range(10):  # row 0 accepts all three drafts, row 1 none
        policy.record(StepPlan(2, 3, [0, 1], 1.0, 1.0), rows, [[0, 1, 2, 3], [0]], seconds=0.02)
    g = policy.gains(rows)
    assert rows[0].rho(policy.prior) > 1.2 and rows[1].rho(policy.prior) < 0.2
    assert float(g[0, 3]) > 5 * float(g[1, 3])
    # the greedy class's curve learnt too (its evidence weighed by ``memory`` per step: the last ~100 steps)
    assert policy.calib.reached[0] == pytest.approx(20, rel=0.05) and policy.calib.realised[0] == pytest.approx(
        10, rel=0.05
    )
    assert sum(policy.calib_sampled.reached) == 0  # no sampled request drafted
    low = rows[1].rho(policy.prior)
    for _ in range(60):  # paused steps its own estimates chose: the evidence fades, ρ returns towards 1
        policy.record(StepPlan(2, 0, [], 1.0, 1.0, reason="predicted"), rows, [], seconds=0.016)
    assert low < rows[1].rho(policy.prior) < 1.0 and rows[1].rho(policy.prior) > 0.5
    assert policy.extra_plain(2) == pytest.approx(0.0, abs=1e-9) and policy.extra_draft(2) > 0.0


def test_greedy_and_sampled_requests_learn_separate_curves():
    """A mixed workload: greedy requests accept their drafts, sampled ones do not. A newly joined request starts
    from its own class's curve, not the average of both: greedy drafts, sampled stays plain."""
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance(), RowAcceptance(sampled=True)]
    for _ in range(20):
        policy.record(StepPlan(2, 3, [0, 1], 1.0, 1.0), rows, [[0, 1, 2, 3], [0]], seconds=0.02)
    fresh = [RowAcceptance(), RowAcceptance(sampled=True)]  # ρ = 1: as good as their class
    policy.record(StepPlan(1, 0, [], 1.0, 1.0), [RowAcceptance()], [], seconds=0.016)  # batch 1's plain step timed
    g = policy.gains(fresh)
    assert float(g[0, 3]) > 2.5 and float(g[1, 3]) < 0.3
    assert policy.plan(fresh[1:]).width == 0 and policy.plan(fresh[:1]).width == 3
    assert policy.plan(fresh[1:]).reason == "predicted" and policy.plan(fresh[:1]).reason == ""


def test_a_class_paused_by_unlucky_drafts_is_tried_again():
    """Three drafts with nothing accepted pause the class (a plain step is worth more); while it is paused its
    curve's evidence fades back to the optimistic prior, so within a bounded number of plain steps it drafts
    again — it cannot stay paused for good on a few unlucky outcomes."""
    policy = LoadPolicy(7, CPU)
    row = [RowAcceptance()]
    for _ in range(3):
        policy.record(StepPlan(1, 7, [0], 1.0, 1.0), row, [[0]], seconds=0.030)
    steps = 0
    while policy.plan(row).width == 0:
        policy.record(policy.last, row, [], seconds=0.016)
        steps += 1
        assert steps < 200, "the paused class never drafted again"
    assert steps > 0  # it did pause first


def test_a_batch_size_without_a_timed_plain_step_takes_one_before_drafting():
    """Plain steps timed only at batch 4 (verify 1.45× the start-up curve there) would make batch 1's plain steps
    look slow and the policy draft there for good; one plain step at batch 1 measures its own scale first."""
    policy = LoadPolicy(3, CPU)
    four = [RowAcceptance() for _ in range(4)]
    for _ in range(5):
        policy.record(StepPlan(4, 0, [], 1.0, 1.0), four, [], 1.5 * CPU(4, 1), verify_seconds=1.45 * CPU(4, 1))
    one = [RowAcceptance()]
    first = policy.plan(one)
    assert first.width == 0 and first.value > first.plain_value  # drafting looked better: plain taken to measure
    assert first.overruled and first.reason == "unmeasured" and first.reason in PLAIN_REASONS
    policy.record(first, one, [], 1.02 * CPU(1, 1), verify_seconds=CPU(1, 1))
    assert policy.plan(one).width > 0  # measured: the optimistic prior drafts again at batch 1
    assert policy.verify_scale(1, False) == pytest.approx(1.0)


def test_overheads_borrow_the_nearest_measured_size_pessimistically():
    o = Overheads()
    assert o(8) == 0.0  # never measured
    o.record(4, 0.004)
    assert o(4) == pytest.approx(0.004) and o(16) == pytest.approx(0.016)  # larger: scaled up
    assert o(1) == pytest.approx(0.004)  # smaller: not scaled down


def test_one_slow_step_does_not_move_an_overhead():
    o = Overheads()
    for _ in range(6):
        o.record(2, 0.001)
    o.record(2, 0.150)  # a request finished, the batch was reshaped, another thread held the interpreter
    assert o(2) == pytest.approx(0.001)


def test_a_stale_drafter_cost_from_a_loaded_batch_is_forgotten():
    """Measured on a server: drafts under load (batch 32, where the start-up cost curve is extrapolated) left
    a drafter cost so large that, back at batch 2 with drafts that pay, it never drafted again. Now the verify's
    own time is charged to the verify, and what the policy has not measured lately is measured again."""
    policy = LoadPolicy(7, CPU)
    rows = [RowAcceptance() for _ in range(2)]
    for _ in range(20):  # good drafts at batch 2: the curve learns that they pay
        policy.record(StepPlan(2, 7, [0, 1], 1.0, 1.0), rows, [list(range(6))] * 2, 0.020, verify_seconds=0.017)
    loaded = [RowAcceptance() for _ in range(32)]
    for _ in range(5):  # under load: verify passes 4x the curve's prediction, and each draft step slow
        plan = StepPlan(32, 7, [0, 1], 1.0, 1.0)
        verify = 4 * CPU(32, 8)
        policy.record(plan, loaded, [list(range(6))] * 2, verify + 0.004, verify_seconds=verify)
    assert policy.extra_draft(2) < 0.005  # the verify's time was not charged to the drafter
    steps = 0
    while policy.plan(rows).width == 0:  # back at batch 2
        policy.record(policy.last, rows, [], 0.017, verify_seconds=0.016)
        steps += 1
        assert steps <= policy.extra_draft.horizon + 1, "a stale cost kept the policy from drafting"


def test_a_stale_plain_cost_is_forgotten_too():
    """The other way round: one slow plain step must not keep a server drafting at a loss for good."""
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance(), RowAcceptance()]
    policy.record(StepPlan(2, 0, [], 1.0, 1.0), rows, [], 0.150, verify_seconds=0.016)  # one slow plain step
    steps = 0
    while True:
        plan = policy.plan(rows)
        if plan.width == 0:
            break
        # drafts that return nothing and cost 30 ms a step
        policy.record(plan, rows, [[0]] * len(plan.rows), 0.030, verify_seconds=0.016)
        steps += 1
        assert steps <= policy.extra_plain.horizon + 1, "a stale plain cost kept the policy drafting"


def test_verify_time_scales_the_cost_curve_by_batch_and_kind():
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance()]
    assert policy.verify_cost(1, 4) == pytest.approx(CPU(1, 4))  # nothing measured: the curve
    policy.record(StepPlan(1, 0, [], 1.0, 1.0), rows, [], 0.040, verify_seconds=2 * CPU(1, 1))
    assert policy.verify_cost(1, 1) == pytest.approx(2 * CPU(1, 1))
    assert policy.verify_cost(1, 4) == pytest.approx(2 * CPU(1, 4))  # the wide kind borrows the plain scale
    policy.record(StepPlan(1, 3, [0], 1.0, 1.0), rows, [[0]], 0.040, verify_seconds=3 * CPU(1, 4))
    assert policy.verify_cost(1, 4) == pytest.approx(3 * CPU(1, 4))  # … until it is measured itself
    assert policy.verify_cost(1, 1) == pytest.approx(2 * CPU(1, 1))


def test_measured_outcomes_overrule_a_prediction_that_loses():
    """The curve and acceptance say drafting pays at batch 4 (predicted 400 tokens/s against 235 for plain), but
    drafting steps delivered 40: the policy serves plain steps — and, once that evidence is ``horizon`` steps
    old, drafts again to see whether it still loses."""
    policy = LoadPolicy(3, CPU, realised=Realised(min_batch=1))  # the correction's mechanism, at a small batch
    rows = [RowAcceptance() for _ in range(4)]
    for _ in range(10):  # drafts accepted in full (the curve learns they pay), but each step slow: 16 tokens/0.4 s
        plan = StepPlan(4, 3, [0, 1, 2, 3], 400.0, 235.0)
        policy.record(plan, rows, [[0, 1, 2, 3]] * 4, 0.4, verify_seconds=0.016)
    for _ in range(3):  # plain steps as predicted: 4 tokens in 0.017 s
        assert not policy.realised.active(4)  # fewer than min_steps plain outcomes: no correction yet
        policy.record(StepPlan(4, 0, [], 400.0, 235.0), rows, [], 0.017, verify_seconds=0.016)
    assert plan_step(policy.gains(rows), policy.verify_cost, [0.0] * 4, 0.0).width > 0  # the prediction drafts
    assert policy.plan(rows).width == 0  # the outcomes do not
    assert policy.last.corrected and not policy.realised.active(3)  # what /metrics counts, per batch size
    assert policy.last.reason == "predicted"  # with the drafting steps' measured overheads (0.38 s) it pauses
    steps = 0
    while policy.plan(rows).width == 0:
        policy.record(policy.last, rows, [], 0.017, verify_seconds=0.016)
        steps += 1
        assert steps <= policy.realised.horizon + 1, "the losing action was never tried again"
    assert steps > 10


def test_a_batch_size_that_only_drafts_takes_plain_steps_until_the_correction_can_compare():
    """At high load the prediction drafts on nearly every step, so plain outcomes at that batch size are too few
    for the correction: after ``min_steps`` drafting outcomes it takes plain steps (no more than ``min_steps``),
    then the correction decides — here drafting delivered as predicted, so it drafts again."""
    policy = LoadPolicy(3, CPU, realised=Realised(min_batch=1))  # the correction's mechanism, at a small batch
    rows = [RowAcceptance() for _ in range(4)]
    policy.record(StepPlan(4, 0, [], 400.0, 235.0), rows, [], 0.017, verify_seconds=0.016)  # the size is timed
    for _ in range(policy.realised.min_steps):  # drafts that delivered their prediction: 16 tokens at 400/s
        policy.record(StepPlan(4, 3, [0, 1, 2, 3], 400.0, 235.0), rows, [[0, 1, 2, 3]] * 4, 0.04, verify_seconds=0.016)
    assert plan_step(policy.gains(rows), policy.verify_cost, [0.0] * 4, 0.0).width > 0  # the prediction drafts
    plains = 0
    while policy.plan(rows).width == 0:
        assert not policy.last.corrected and policy.last.reason == "blind"
        policy.record(policy.last, rows, [], 4 / 235.0, verify_seconds=0.016)
        plains += 1
    assert plains == policy.realised.min_steps - 1  # one plain outcome was there already
    assert policy.last.corrected and policy.last.draft_factor == pytest.approx(1.0, rel=1e-6)


def test_measured_outcomes_overrule_a_prediction_that_would_not_draft():
    """Predicted: drafting 90 tokens/s against plain's 100; delivered: 400 against 100. It drafts."""
    policy = LoadPolicy(3, CPU, realised=Realised(min_batch=1))  # the correction's mechanism, at a small batch
    rows = [RowAcceptance() for _ in range(2)]
    for _ in range(3):
        policy.record(StepPlan(2, 3, [0, 1], 90.0, 100.0), rows, [[0, 1, 2, 3]] * 2, 0.02, verify_seconds=0.016)
        policy.record(StepPlan(2, 0, [], 90.0, 100.0), rows, [], 0.02, verify_seconds=0.016)
    for _ in range(9):  # a drafter cost measured too high (fresh: not forgotten yet): the prediction says plain
        policy.extra_draft.record(1, 0.14)
        policy.extra_draft.record(2, 0.14)
    assert plan_step(policy.gains(rows), policy.verify_cost, [0.14, 0.14], policy.extra_plain(2)).width == 0
    assert policy.plan(rows).width > 0  # drafting's steps delivered 4.4x its predictions, plain's 1x


def test_outcomes_are_compared_to_their_own_predictions_not_across_request_classes():
    """Greedy requests draft (400 tokens/s, as predicted) and sampled ones were left plain (60 tokens/s, as
    predicted): each action delivered what it promised, so nothing is corrected — a sampled request whose
    prediction says plain stays plain, though drafting's raw rate is higher."""
    policy = LoadPolicy(3, CPU)
    greedy, sampled = [RowAcceptance()], [RowAcceptance(sampled=True)]
    for _ in range(3):
        policy.record(StepPlan(1, 3, [0], 400.0, 60.0), greedy, [[0, 1, 2, 3]], 0.01, verify_seconds=0.008)
        policy.record(StepPlan(1, 0, [], 50.0, 60.0), sampled, [], 1 / 60, verify_seconds=0.015)
    assert policy.realised.factors(1) == (pytest.approx(1.0), pytest.approx(1.0))
    for _ in range(30):  # the sampled class never accepts: its prediction says plain
        policy.record(StepPlan(1, 3, [0], 50.0, 60.0), [RowAcceptance(sampled=True)], [[0]], 0.03, 0.016)
    policy.realised.steps.clear()
    policy.regimes = Regimes()  # the sampled drafts' measured loss would veto drafting by itself
    assert policy.plan(sampled).width == 0


class RandomPlans(LoadPolicy):
    """Widths 0…n and drafting rows drawn at random, independently of the target: any such plan must stay
    lossless, and random draws exercise paused rows beside drafting ones, every width and plain steps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.g = torch.Generator().manual_seed(0)
        self.paused_rows = 0  # rows left without drafts in steps where others drafted

    def plan(self, rows: list[RowAcceptance]) -> StepPlan:
        b = len(rows)
        plain = float(torch.rand(1, generator=self.g)) < 0.25
        width = 0 if plain else int(torch.randint(1, self.n + 1, (1,), generator=self.g))
        pick = torch.rand(b, generator=self.g) < 0.5
        chosen = pick.nonzero().squeeze(1).tolist() if width else []
        self.last = StepPlan(b, width if chosen else 0, chosen, 1.0, 1.0)
        self.paused_rows += (b - len(chosen)) if chosen else 0
        return self.last


def _random_plans(engine):
    policy = engine.use_load_policy(batches=(1, 2))
    assert policy is not None and engine.gate is None and engine.adaptive is None
    engine.policy = RandomPlans(policy.n, policy.cost, tree=policy.tree)
    return engine


TREE9 = {"tree_budget": 9}


@pytest.mark.parametrize(
    "method, options",
    [("dflash", {}), ("lilicorr", {}), ("ddtree", TREE9), ("lilicorr-tree", {**TREE9, "prompt_lookup_max": 2})],
)
def test_policy_greedy_identity_under_batching(tiny_target, method, options):
    """Requests join a running batch at different times while random plans pause some rows and vary the
    width: every request still gets the target's own greedy tokens."""
    prompts = _prompts(12)
    ref = [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in prompts]
    draft = random_draft(tiny_target, lilicorr=method.startswith("lilicorr"))
    engine = _random_plans(build_engine(tiny_target, SpecConfig(method=method, options=options), draft))
    reqs = _requests(prompts)
    waiting = list(reqs)
    engine.add([waiting.pop(0) for _ in range(3)])
    while engine.seqs or waiting:
        if waiting:  # one joins every step
            engine.add([waiting.pop(0)])
        engine.step()
    assert [r.output_ids for r in reqs] == ref
    st = engine.stats
    assert st.num_paused_steps > 0 and engine.policy.paused_rows > 0
    assert 0 < st.num_draft_tokens < st.num_proposed_tokens
    assert sum(r.stats.num_drafts for r in reqs) == st.num_drafts  # paused rows record no draft


def test_real_policy_greedy_identity_and_pauses_under_load(tiny_target):
    """The real policy on a random drafter (drafts almost never accepted): lossless, and once the batch is
    large it stops drafting."""
    prompts = _prompts(16)
    ref = [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in prompts]
    engine = build_engine(tiny_target, SpecConfig(method="dflash"), random_draft(tiny_target, lilicorr=False))
    policy = engine.use_load_policy(batches=(1, 2))
    policy.cost = CostModel(base=0.0, per_token=0.01)  # scripted: every verify token costs one plain step
    reqs = engine.generate(_requests(prompts))
    assert [r.output_ids for r in reqs] == ref
    assert policy.last is not None and engine.stats.num_paused_steps > 0


@pytest.mark.parametrize(
    "cfg",
    [
        SpecConfig(num_speculative_tokens=3, draft_sample_method="probabilistic"),
        SpecConfig(method="lilicorr-tree", options={"tree_budget": 7}),
    ],
    ids=["chain", "tree"],
)
def test_policy_sampling_matches_target(small_vocab_target, cfg):
    draft = random_draft(small_vocab_target, lilicorr=True, block=4, k=4)
    engine = _random_plans(build_engine(small_vocab_target, cfg, draft))
    exact = exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))
    assert p_value(_joint_counts(engine), exact) > ALPHA
    assert engine.policy.paused_rows > 0 and engine.stats.num_accepted_tokens > 0


def test_no_policy_without_drafts(tiny_target):
    assert build_engine(tiny_target).use_load_policy() is None  # plain decoding: nothing to decide
    req = Request([5, 6, 7], SamplingParams(max_tokens=4), eos_ids=frozenset())
    engine = build_engine(tiny_target, SpecConfig(method="dflash"), random_draft(tiny_target, lilicorr=False))
    engine.use_load_policy(batches=(1,))
    engine.generate([req])
    assert len(req.output_ids) == 4


def test_a_measured_loss_bans_drafting_in_its_bucket_for_a_doubling_while():
    """Session 35's batch-32 step: plain steps deliver 32 tokens in 0.27 s, one drafting step 88 tokens in 1.4 s
    (0.53x per row-second). Judged at once (32 rows average out acceptance luck): drafting is banned for the
    batch sizes of that bucket (32-63) for ``horizon`` steps, then for twice that after another loss; a win
    clears the ban."""
    reg = Regimes()
    for _ in range(3):
        reg.tick()
        reg.record(32, False, 32, 0.27)
    reg.tick()
    reg.record(32, True, 88, 1.4)
    assert reg.banned(32) and reg.banned(40) and not reg.banned(31) and not reg.banned(64)
    lengths = []
    for _ in range(2):
        steps = 0
        while reg.banned(32):
            reg.tick()
            reg.record(32, False, 32, 0.27)
            steps += 1
        lengths.append(steps)
        reg.tick()
        reg.record(33, True, 80, 1.4)  # tried again: it still loses
    assert lengths == [reg.horizon, 2 * reg.horizon]
    while reg.banned(32):
        reg.tick()
        reg.record(32, False, 32, 0.27)
    for _ in range(3):  # now drafting pays: 60 tokens in 0.4 s (150/s against 119/s)
        reg.tick()
        reg.record(32, True, 60, 0.4)
    assert not reg.banned(32) and (5, None) not in reg.bans


def test_one_unlucky_row_is_not_a_verdict():
    """A draft rejected whole is ordinary for one row: one such step (1 token in twice a plain step's time) does
    not ban drafting; ``min_steps`` of them in a row do (here judged class-blind from batch 1)."""
    reg = Regimes(min_batch=1)
    for _ in range(3):
        reg.tick()
        reg.record(1, False, 1, 0.035)
    reg.tick()
    reg.record(1, True, 1, 0.07)
    assert not reg.banned(1)
    for _ in range(reg.min_steps - 1):
        reg.tick()
        reg.record(1, True, 1, 0.07)
    assert reg.banned(1)


def test_small_batches_are_judged_per_request_class():
    """Below a loaded batch each class is judged on its own drafting steps (session 47, batch 1: plain steps of
    23 ms, drafting steps of 69 ms returning 2.05 tokens). Sampled rows lose and are banned after
    ``small_min_steps`` drafting steps, at 1 row and at every batch below a loaded one; greedy rows win (3 tokens in
    50 ms) and stay free, in the same bucket; a drafting step recorded without its classes is not judged."""
    reg = Regimes()
    for _ in range(3):
        reg.tick()
        reg.record(1, False, 1, 0.023)
    for _ in range(reg.small_min_steps):
        reg.tick()
        reg.record(1, True, 2, 0.069, frozenset({True}))
        assert not reg.banned(1, False)
        reg.tick()
        reg.record(1, True, 3, 0.050, frozenset({False}))
        reg.tick()
        reg.record(4, True, 4, 0.5)  # no classes: not judged
    assert reg.banned(1, True) and not reg.banned(1, False) and not reg.banned(1)
    assert not reg.banned(4, False)
    # a loss at 1 row is a loss at 2-7 rows (a wide verify costs relatively more there), not at a loaded batch
    assert reg.banned(2, True) and reg.banned(7, True) and not reg.banned(8, True) and not reg.banned(8)


def test_a_class_ban_leaves_the_other_class_drafting_at_a_small_batch():
    """Two rows at batch 2, one greedy and one sampled; the sampled class is banned at this bucket: the plan
    drafts the greedy row only; with both classes banned the step is plain, named "banned"."""
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance(), RowAcceptance(sampled=True)]
    for _ in range(3):
        policy.record(StepPlan(2, 0, [], 100.0, 100.0), rows, [], 0.017, verify_seconds=0.016)
    assert policy.plan(rows).rows == [0, 1]
    policy.regimes.bans[(size_bucket(2), True)] = (policy.regimes.clock + 10_000, 0)
    plan = policy.plan(rows)
    assert plan.width > 0 and plan.rows == [0] and plan.corrected
    policy.regimes.bans[(size_bucket(2), False)] = (policy.regimes.clock + 10_000, 0)
    plan = policy.plan(rows)
    assert plan.width == 0 and plan.reason == "banned"


def test_a_ban_makes_the_policy_serve_plain_steps_whatever_the_prediction():
    """The prediction drafts; drafting steps measured in the bucket (batch 9, the same bucket as 8) delivered less
    per row-second than plain steps: the plan is a plain step, counted as corrected on /metrics."""
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance() for _ in range(8)]
    for _ in range(3):
        policy.record(StepPlan(8, 0, [], 470.0, 470.0), rows, [], 0.017, verify_seconds=0.016)
    assert policy.plan(rows).width > 0 and not policy.last.corrected
    for _ in range(policy.regimes.min_steps):
        policy.regimes.record(9, True, 9, 0.2)
    assert policy.regimes.banned(8)
    assert plan_step(policy.gains(rows), policy.verify_cost, [0.0] * 8, 0.0).width > 0  # the prediction drafts
    assert policy.plan(rows).width == 0 and policy.last.corrected and policy.last.reason == "banned"


def test_an_unmeasured_tree_is_tried_at_batch_1_and_not_at_batch_32():
    """Before any evidence a 15-node tree's prior is optimistic at low load (½ a node: every width gets tried
    where a wide verify costs about a plain step) and cautious at high load (½, ¼, … by rank: ≈ 1 accepted draft,
    as a chain's prior), where a try costs several plain steps; a chain's prior is ≈ 1 draft at either load."""
    cpu = CostModel(base=0.0, per_token=0.0, points=((1.0, 0.016), (16.0, 0.016), (64.0, 0.064), (512.0, 0.512)))
    tree = LoadPolicy(15, cpu, tree=True)
    assert float(tree.gains([RowAcceptance()])[0, -1]) == pytest.approx(7.5)
    assert plan_step(tree.gains([RowAcceptance()]), cpu, [0.0], 0.0).width == 15
    loaded = tree.gains([RowAcceptance() for _ in range(32)])  # [32, 16]
    assert float(loaded[0, -1]) < 1.0
    assert plan_step(loaded, cpu, [0.0] * 32, 0.0).width == 0
    chain = LoadPolicy(15, cpu)
    assert float(chain.gains([RowAcceptance()])[0, -1]) == float(chain.gains([RowAcceptance()] * 32)[0, -1]) < 1.0


def test_a_pause_the_load_forces_keeps_what_was_learnt():
    """Drafting banned at 8 rows for a long while: at a loaded batch no plain step fades anything, whether a rule
    or the prediction chose it, so the class's curve and the rows' acceptance keep their evidence and when the batch
    falls to 7 rows the plan
    rests on what drafts delivered, not on the optimistic prior a 15-node tree starts from (session 37: a step at
    7 rows after a long forced pause at 8 predicted 50.7 tokens and delivered 17). Below a loaded batch a pause the
    prediction chose still fades (``test_a_row_paused_by_its_own_drafts_drafts_again_at_batch_1``)."""
    policy = LoadPolicy(15, CPU, tree=True)
    rows = [RowAcceptance() for _ in range(7)]
    for _ in range(20):  # at 7 rows every draft has its first node accepted, nothing deeper
        policy.record(StepPlan(7, 15, list(range(7)), 1.0, 1.0), rows, [[0, 1]] * 7, 0.05, verify_seconds=0.04)
    learnt, rho = float(policy.gains(rows)[0, -1]), rows[0].rho(policy.prior)
    assert learnt < 2.0  # the optimistic prior alone: 7.5
    eight = [*rows, RowAcceptance()]
    policy.regimes.bans[(size_bucket(8), None)] = (policy.regimes.clock + 10_000, 0)
    for _ in range(200):
        plan = policy.plan(eight)
        assert plan.width == 0
        policy.record(plan, eight, [], 0.02, verify_seconds=0.016)
    assert float(policy.gains(rows)[0, -1]) == pytest.approx(learnt)
    assert rows[0].rho(policy.prior) == pytest.approx(rho)


def test_a_row_paused_by_its_own_drafts_drafts_again_at_batch_1():
    """At batch 1 the outcomes match the predictions (no correction says otherwise), and a few drafts with nothing
    accepted make the row's own estimate pause it: a "predicted" pause, which fades the row's evidence, so it
    drafts again within a few plain steps. Before session 38 such a pause counted as forced by the load and faded
    nothing: the row stayed plain until a correction expired (a T = 0.7 row drafted on 15-23 % of steps at batch
    1 where drafting every step served 1.2-1.3x plain)."""
    policy = LoadPolicy(3, CPU)
    row = [RowAcceptance()]
    plain_s, draft_s = CPU(1, 1), CPU(1, 4) + 0.016  # the drafter costs a plain step
    for _ in range(4):  # plain steps and good drafts, each delivering what the plan predicted
        policy.record(StepPlan(1, 0, [], 1 / plain_s, 1 / plain_s), row, [], plain_s, verify_seconds=plain_s)
        policy.record(StepPlan(1, 3, [0], 4 / draft_s, 1 / plain_s), row, [[0, 1, 2, 3]], draft_s, CPU(1, 4))
    assert policy.plan(row).width > 0
    fails = 0
    while policy.plan(row).width:  # the row's next drafts: nothing accepted
        policy.record(StepPlan(1, 3, [0], 1 / draft_s, 1 / plain_s), row, [[0]], draft_s, CPU(1, 4))
        fails += 1
        assert fails < 6
    first = policy.last
    assert first.width == 0 and first.reason == "predicted" and not first.overruled
    steps = 0
    while policy.plan(row).width == 0:
        assert policy.last.reason == "predicted"
        policy.record(policy.last, row, [], plain_s, verify_seconds=plain_s)
        steps += 1
        assert steps < 200, "a row paused by its own drafts never drafted again"


def test_an_outcome_correction_that_overrules_the_prediction_is_named_losing_and_fades_nothing():
    """At a loaded batch (8 rows) the rows' estimates and measured times say drafting pays, but drafting steps
    delivered a tenth of what their plans predicted: the correction makes the step plain — "losing", overruled —
    and at a loaded batch no plain step fades the rows' evidence."""
    policy = LoadPolicy(3, CPU)
    rows = [RowAcceptance() for _ in range(8)]
    for _ in range(4):  # plain steps as predicted; drafts accepted in full, in 0.04 s, but predicted at 10x that
        policy.record(StepPlan(8, 0, [], 8 / 0.016, 8 / 0.016), rows, [], 0.016, verify_seconds=0.016)
        policy.record(StepPlan(8, 3, list(range(8)), 8000.0, 500.0), rows, [[0, 1, 2, 3]] * 8, 0.04, CPU(8, 4))
    kept = [(r.accepted, r.expected) for r in rows]
    plan = policy.plan(rows)
    assert plan.value > plan.plain_value * (1 + policy.margin)  # the raw prediction drafts
    assert plan.width == 0 and plan.overruled and plan.reason == "losing" and plan.corrected
    policy.record(plan, rows, [], 0.016, verify_seconds=0.016)
    assert [(r.accepted, r.expected) for r in rows] == kept


def test_no_outcome_correction_below_a_loaded_batch():
    """The same outcomes at batch 1 (drafting delivered a tenth of its predictions) correct nothing: there the
    class-aware estimates decide alone, since the class-blind factor pooled greedy and sampled drafts and a row
    drafts when its estimate is high (measured: the correction kept a T = 0.7 row plain on 268-302 of ≈ 400 steps
    at batch 1 while its drafting steps delivered 1.33x plain; session 38)."""
    policy = LoadPolicy(3, CPU)
    row = [RowAcceptance()]
    for _ in range(4):
        policy.record(StepPlan(1, 0, [], 1 / 0.016, 1 / 0.016), row, [], 0.016, verify_seconds=0.016)
        policy.record(StepPlan(1, 3, [0], 1000.0, 62.5), row, [[0, 1, 2, 3]], 0.02, verify_seconds=0.016)
    assert policy.realised.factors(1) == (1.0, 1.0) and not policy.realised.lacks_plain(1)
    plan = policy.plan(row)
    assert plan.width == 3 and not plan.corrected


def test_a_row_left_out_of_a_drafting_step_fades_below_a_loaded_batch_and_not_from_it():
    """A row the plan leaves out of a drafting step is paused too: below 8 rows its evidence fades back towards its
    class (so it is tried again), from 8 rows it keeps it, as on a plain step."""
    for size, fades in ((2, True), (8, False)):
        policy = LoadPolicy(3, CPU)
        rows = [RowAcceptance(accepted=0.0, expected=4.0) for _ in range(size)]
        policy.record(StepPlan(size, 3, [0], 1.0, 1.0), rows, [[0, 1]], 0.02, verify_seconds=0.016)
        assert (rows[1].expected < 4.0) is fades and rows[1].accepted == 0.0


def test_the_plain_steps_deferred_fusing_is_charged_to_them_not_to_the_next_drafting_step():
    """A plain step leaves its taps for the next drafting step to fuse. Charged to that step, 10 paused steps' fusing
    (here 6 ms) made drafting look 6 ms dearer than it is; it is the plain steps' cost, per tap."""
    policy = LoadPolicy(7, CPU)
    rows = [RowAcceptance() for _ in range(2)]
    for _ in range(10):  # plain steps at batch 2: 20 taps wait; nothing known of their fusing yet
        policy.record(StepPlan(2, 0, [], 1.0, 1.0), rows, [], 0.017, verify_seconds=0.016)
    assert policy.extra_plain(2) == pytest.approx(0.001)
    # the drafting step: 4 ms of its own beyond the verify, 6 ms fusing the 20 deferred taps
    policy.record(
        StepPlan(2, 7, [0, 1], 1.0, 1.0), rows, [[0, 1]] * 2, 0.030, 0.020, deferred_seconds=0.006, deferred_taps=20
    )
    assert policy.extra_draft(2) == pytest.approx(0.004)
    assert policy.deferred.per_tap == pytest.approx(0.0003)
    for _ in range(9):  # later plain steps carry their share: 2 rows × 0.3 ms on top of their 1 ms
        policy.record(StepPlan(2, 0, [], 1.0, 1.0), rows, [], 0.017, verify_seconds=0.016)
    assert policy.extra_plain(2) == pytest.approx(0.0016)
    # a drafting step after no plain step fused nothing and leaves the per-tap cost alone
    policy.record(StepPlan(2, 7, [0, 1], 1.0, 1.0), rows, [[0, 1]] * 2, 0.024, 0.020)
    assert policy.deferred.per_tap == pytest.approx(0.0003)


def test_the_engine_hands_the_policy_its_deferred_fusing(tiny_target):
    """The engine measures the fusing of the paused steps' taps and counts them (rows × paused steps)."""
    draft = random_draft(tiny_target)
    engine = build_engine(tiny_target, SpecConfig(method="dflash", num_speculative_tokens=3), draft)
    policy = engine.use_load_policy(batches=(1,))
    assert policy is not None
    seen: list[tuple[int, int, float]] = []
    record = policy.record

    def spy(plan, rows, paths, seconds, verify_seconds=None, deferred_seconds=0.0, deferred_taps=0):
        seen.append((plan.width, deferred_taps, deferred_seconds))
        record(plan, rows, paths, seconds, verify_seconds, deferred_seconds, deferred_taps)

    policy.record = spy
    plans = itertools.cycle([0, 0, 0, 3])
    policy.plan = lambda rows: StepPlan(len(rows), (w := next(plans)), list(range(len(rows))) if w else [], 1.0, 1.0)
    engine.generate(_requests(_prompts(2), eos=frozenset(), ignore_eos=True))
    drafting = [(taps, s) for w, taps, s in seen if w]
    assert drafting and drafting[0][0] == 2 * 3 and drafting[0][1] > 0  # 2 rows × 3 paused steps
    assert all(taps == 0 for w, taps, _ in seen if not w)


def test_overheads_upto_reads_each_bucket_once_and_equals_the_per_row_values():
    """The plan asks for the drafting overhead of every row count of the batch each step; ``upto`` returns the
    same values as asking row count by row count (borrowed buckets scaled up, none measured: 0)."""
    over = Overheads()
    assert over.upto(3) == [0.0, 0.0, 0.0]
    for rows, seconds in ((1, 0.004), (2, 0.005), (8, 0.02), (12, 0.03)):
        over.tick()
        over.record(rows, seconds)
    assert over.upto(40) == [over(k) for k in range(1, 41)]
