"""Adaptive verification: the width rule, its calibration, and losslessness (greedy identity and the exact
sampling distribution) while the verified prefix really varies."""

import pytest
import torch

from lilicorr.decoding.adaptive import AdaptiveWidth, CostModel, DraftGate
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import MAX_TOKENS, _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, PROMPT, SAMPLES, V, exact_distribution, p_value


def test_width_follows_confidence_and_cost():
    flat = AdaptiveWidth(4, CostModel(base=1.0, per_token=0.0))
    assert flat.choose(torch.full((2, 4), 0.9)) == 4  # a free wider verify: take every draft
    steep = AdaptiveWidth(4, CostModel(base=0.1, per_token=1.0))
    assert steep.choose(torch.full((2, 4), 0.01)) == 0  # drafts that never pay: an AR step
    mid = AdaptiveWidth(4, CostModel(base=1.0, per_token=0.2))
    assert 0 < mid.choose(torch.tensor([[0.9, 0.8, 0.1, 0.1]])) < 4
    assert mid.choose(torch.tensor([[0.9, 0.8, 0.1, 0.1]]), draft_cost=5.0) == 0  # the drafter itself does not pay


def test_calibration_tracks_realised_acceptance():
    a = AdaptiveWidth(2, CostModel(base=1.0, per_token=0.0))
    conf = torch.full((1, 2), 0.01)  # an unsure drafter whose first token is nevertheless always right
    for _ in range(48):
        a.update(conf, [[0, 1]], 2)  # first accepted, second rejected
    est = a.acceptance(conf)[0]
    assert est[0] > 0.95 and est[1] < 0.05
    assert a.calibration()[0] == {"position": 1, "reached": 48, "mean_probability": 0.01, "realised": 1.0}
    assert a.acceptance(torch.tensor([[0.005, 0.01]]))[0, 0] < 0.5  # half as sure as usual: half the rate


class RandomWidth(AdaptiveWidth):
    """Widths 0…n drawn independently of the target: any such choice must stay lossless, and random draws
    exercise every prefix length and the AR fallback (random drafters are too unsure for the real rule)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.g = torch.Generator().manual_seed(0)

    def choose(self, conf: torch.Tensor, draft_cost: float = 0.0) -> int:
        return int(torch.randint(0, self.n + 1, (1,), generator=self.g))


def _joint_counts(engine) -> torch.Tensor:
    """Counts of the first three sampled tokens over ``SAMPLES`` seeded requests (T = 1)."""
    counts = torch.zeros(V**3)
    for chunk in range(0, SAMPLES, 1000):
        reqs = [
            Request(list(PROMPT), SamplingParams(max_tokens=3, seed=chunk + i, temperature=1.0), eos_ids=frozenset())
            for i in range(1000)
        ]
        engine.generate(reqs)
        for r in reqs:
            a, b, c = r.output_ids[:3]
            counts[a * V * V + b * V + c] += 1
    return counts


def _varying(engine):
    engine.adaptive = RandomWidth(engine.adaptive.n, engine.adaptive.cost, tree=engine.adaptive.tree)
    engine.gate = None  # every step drafts, so every random width is exercised (the gate has its own tests)
    return engine


TREE9 = {"tree_budget": 9}


@pytest.mark.parametrize(
    "method, options", [("dflash", {}), ("lilicorr", {}), ("ddtree", TREE9), ("lilicorr-tree", TREE9)]
)
def test_adaptive_greedy_identity(tiny_target, method, options):
    """Chains verify a prefix, trees a best-first subtree: the output stays the target's own."""
    prompts = _prompts(12)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    draft = random_draft(tiny_target, lilicorr=method.startswith("lilicorr"))
    cfg = SpecConfig(method=method, options=options, enable_adaptive_verification=True)
    engine = build_engine(tiny_target, cfg, draft)
    assert engine.adaptive is not None and engine.adaptive.cost.base > 0  # measured at start-up
    assert engine.adaptive.tree == bool(options) and engine.adaptive.n == (8 if options else engine.n)
    _varying(engine)
    reqs = _requests(prompts)
    for i in range(0, len(reqs), 3):
        engine.generate(reqs[i : i + 3])
    assert [r.output_ids for r in reqs] == ref
    st = engine.stats
    assert 0 < st.num_draft_tokens < st.num_proposed_tokens  # some steps verified a shorter prefix / smaller tree


@pytest.mark.parametrize(
    "cfg",
    [
        SpecConfig(num_speculative_tokens=3, draft_sample_method="probabilistic", enable_adaptive_verification=True),
        SpecConfig(method="lilicorr-tree", options={"tree_budget": 7}, enable_adaptive_verification=True),
    ],
    ids=["chain", "tree"],
)
def test_adaptive_sampling_matches_target(small_vocab_target, cfg):
    draft = random_draft(small_vocab_target, lilicorr=True, block=4, k=4)
    engine = _varying(build_engine(small_vocab_target, cfg, draft))
    exact = exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))
    assert p_value(_joint_counts(engine), exact) > ALPHA
    st = engine.stats
    assert 0 < st.num_draft_tokens < st.num_proposed_tokens and st.num_accepted_tokens > 0


def test_unsure_drafts_fall_back_to_ar_steps(tiny_target):
    """The real rule with a random drafter (drafts never pay): mostly AR steps, pauses before drafting again,
    and still the target's own tokens."""
    prompts = _prompts(4)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    cfg = SpecConfig(method="dflash", enable_adaptive_verification=True)
    engine = build_engine(tiny_target, cfg, random_draft(tiny_target, lilicorr=False))
    engine.adaptive.cost = CostModel(base=0.01, per_token=1.0)  # a verify token costs 100 AR steps
    reqs = engine.generate(_requests(prompts))
    assert [r.output_ids for r in reqs] == ref
    assert engine.stats.num_draft_tokens == 0 and engine.stats.num_proposed_tokens > 0


def test_no_gate_unless_asked(tiny_target):
    draft = random_draft(tiny_target, lilicorr=False)
    assert build_engine(tiny_target, SpecConfig(method="dflash"), draft).gate is None
    from lilicorr.decoding.config import parse_speculative_config

    assert parse_speculative_config({"method": "dflash", "model": "x", "draft_gate": True}).draft_gate
    with pytest.raises(ValueError, match="'draft_gate' must be true or false"):
        parse_speculative_config({"method": "dflash", "model": "x", "draft_gate": 1})


def test_speculative_config_key():
    from lilicorr.decoding.config import parse_speculative_config

    assert parse_speculative_config(
        {"method": "ngram", "enable_adaptive_verification": True}
    ).enable_adaptive_verification
    with pytest.raises(ValueError, match="true or false"):
        parse_speculative_config({"method": "ngram", "enable_adaptive_verification": "yes"})


def test_cost_model_interpolates_the_measured_curve():
    cost = CostModel(base=0.0, per_token=0.0, points=((1.0, 1.0), (8.0, 1.0), (16.0, 3.0)))
    assert cost(1, 1) == 1.0 and cost(1, 4) == 1.0  # flat up to 8 tokens
    assert cost(1, 12) == pytest.approx(2.0) and cost(2, 8) == pytest.approx(3.0)
    assert cost(1, 24) == pytest.approx(5.0)  # beyond the last point: the last segment's slope


def test_cost_model_measured_on_a_target(tiny_target):
    cost = CostModel.measure(tiny_target, 9, batches=(1, 2), reps=1)
    xs = [p[0] for p in cost.points]
    assert xs == sorted(xs) and {1.0, 9.0, 18.0} <= set(xs)
    assert all(b[1] >= a[1] for a, b in zip(cost.points, cost.points[1:], strict=False))  # never falls
    assert cost(1, 1) > 0


def test_tree_widths_sum_node_probabilities():
    """A tree's expected accepted length is the sum over its nodes of P(node on the accepted path)."""
    tree = AdaptiveWidth(3, CostModel(base=1.0, per_token=0.0), tree=True)
    chain = AdaptiveWidth(3, CostModel(base=1.0, per_token=0.0))
    conf = torch.full((1, 3), 0.5)
    for a in (tree, chain):  # calibrate both to "as sure as usual"
        a.update(conf, [[0, 1, 2, 3]], 3)
    zero = torch.zeros(1, 1, dtype=torch.float64)
    torch.testing.assert_close(tree.expected(conf), torch.cat([zero, tree.acceptance(conf).cumsum(1)], 1))
    assert float(tree.expected(conf)[0, -1]) > float(chain.expected(conf)[0, -1])  # siblings add, not multiply
    # a tree's node is reached whenever it is verified; realised only on the accepted path
    t = AdaptiveWidth(4, CostModel(base=1.0, per_token=0.0), tree=True)
    t.update(torch.full((1, 4), 0.1), [[0, 2]], 4)  # node 2 (position 2) accepted, nodes 1, 3, 4 not
    assert t.reached == [1.0] * 4 and t.realised == [0.0, 1.0, 0.0, 0.0]
    assert t.calibration()[1]["rank"] == 2


def test_auto_tree_budget(tiny_target):
    """``tree_budget: auto`` prunes each tree by the measured cost curve, without the flag."""
    from lilicorr.decoding.config import parse_speculative_config
    from lilicorr.decoding.methods import get_method
    from lilicorr.decoding.methods.trees import AUTO_TREE_CAP

    assert get_method("ddtree").resolve_options({})["tree_budget"] == 16  # measured faster than auto here
    assert parse_speculative_config({"method": "ddtree", "model": "x", "tree_budget": "auto"}).options == {
        "tree_budget": "auto"
    }
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        parse_speculative_config({"method": "ddtree", "model": "x", "tree_budget": "big"})
    auto = SpecConfig(method="ddtree", options={"tree_budget": "auto"})
    engine = build_engine(tiny_target, auto, random_draft(tiny_target, lilicorr=False))
    assert engine.adaptive is not None and engine.adaptive.tree and engine.adaptive.n == AUTO_TREE_CAP - 1
    fixed = build_engine(
        tiny_target, SpecConfig(method="ddtree", options={"tree_budget": 8}), random_draft(tiny_target, lilicorr=False)
    )
    assert fixed.adaptive is None


def _steps(gate: DraftGate, n: int, drafted_tokens: int, chose_none: bool = False) -> str:
    """``n`` engine steps on a machine where a plain step returns 2 tokens/s and a drafting step
    ``drafted_tokens`` per second: "D" where the gate let the drafter run, "." where not."""
    seen = ""
    for _ in range(n):
        if gate.should_draft():
            gate.record(True, seconds=1.0, tokens=drafted_tokens, chose_none=chose_none)
            seen += "D"
        else:
            gate.record(False, seconds=0.5, tokens=1)
            seen += "."
    return seen


def test_gate_pauses_a_losing_drafter_for_its_probe_budget():
    # no plain rate yet: one plain step measures it. Then a probe costs 1 s for 1 token where plain steps take 0.5 s:
    # 0.5 s lost a probe, so a 10 % budget pauses 0.5 / (0.1 · 0.5) = 10 plain steps between probes
    gate = DraftGate(probe_budget=0.1)
    assert _steps(gate, 26, drafted_tokens=1) == "D.D..........D..........D"[:26] + "."[: 26 - 25]
    assert gate.backoff == 10
    # a drafter further behind waits longer, up to max_pause
    assert _steps(DraftGate(probe_budget=0.01, max_pause=16), 20, drafted_tokens=1) == "D.D................D"


def test_gate_follows_a_good_step_with_another():
    """Acceptance comes in runs: a drafting step that returned at least the break-even count is followed by
    another even while the running mean says drafting loses; a poor one then pauses again."""
    gate = DraftGate(probe_budget=0.1)
    gate.record(False, seconds=0.5, tokens=1)  # plain: 0.5 s a token, so break-even is 2 tokens a 1 s step
    for _ in range(5):
        gate.record(True, seconds=1.0, tokens=1)
        gate.skip = 0
    assert gate.rate(True) < gate.rate(False)
    gate.record(True, seconds=1.0, tokens=3)  # the mean still loses, this step did not
    assert gate.skip == 0 and gate.should_draft()
    gate.record(True, seconds=1.0, tokens=1)
    assert gate.skip > 0


def test_a_new_request_ends_the_pause():
    gate = DraftGate(probe_budget=0.01)
    _steps(gate, 4, drafted_tokens=1)
    assert gate.skip > 0 and not gate.should_draft()
    gate.new_text()
    assert gate.should_draft()


def test_a_prompt_on_an_idle_engine_ends_the_pause_a_join_does_not(tiny_target):
    engine = build_engine(tiny_target, SpecConfig(method="dflash", draft_gate=True), random_draft(tiny_target))
    first, second = _requests(_prompts(2))
    engine.gate.skip = engine.gate.backoff = 5
    engine.add([first])  # one request after another (generate, bench): probed at once
    assert engine.gate.skip == 0
    engine.gate.skip = engine.gate.backoff = 5
    engine.add([second])  # joins a running batch: the pause stands
    assert engine.gate.skip == 5


def test_deferred_fusing_is_charged_to_the_plain_steps():
    """The taps of paused steps are fused by the next drafting step: its seconds count against the plain steps
    that deferred them, not against the probe."""
    gate = DraftGate(smoothing=1.0)  # means of the newest step only: exact figures
    for _ in range(4):
        gate.record(False, seconds=0.5, tokens=1)
    gate.record(True, seconds=1.4, tokens=2, deferred_s=0.4, deferred_taps=4)  # 4 paused steps of one row
    assert gate.rate(True) == pytest.approx(2.0)  # 2 tokens in the 1.0 s of its own work
    assert gate.skip == 0  # break-even is 2 tokens: it keeps drafting
    gate.record(False, seconds=0.5, tokens=1)
    assert gate.rate(False) == pytest.approx(1 / 0.6)  # each of the 4 deferring steps took 0.1 s more, later


def test_gate_compares_rates_at_the_same_batch_size():
    gate = DraftGate()
    gate.record(False, seconds=1.0, tokens=1, batch=1)  # plain at batch 1: 1 token/s
    gate.record(True, seconds=1.0, tokens=6, batch=8)  # drafting at batch 8: no plain rate there yet
    assert gate.skip == 1 and gate.rate(False, 8) is None and gate.rate(True, 9) == 6.0  # 8–15 share a bucket
    gate.skip = 0
    gate.record(False, seconds=1.0, tokens=8, batch=8)  # plain at batch 8 is faster than drafting there
    gate.record(True, seconds=1.0, tokens=6, batch=8)
    assert gate.skip == gate.backoff > 0  # paused, although drafting beats batch 1's plain rate


def test_gate_refreshes_the_plain_rate():
    gate = DraftGate(max_pause=4)
    assert _steps(gate, 12, drafted_tokens=3) == "D.DDDD.DDDD."  # a plain step after max_pause drafting steps


@pytest.mark.parametrize("alone", [False, True], ids=["with-width-rule", "gate-alone"])
def test_slow_drafter_falls_back_to_plain_steps(tiny_target, monkeypatch, alone):
    """A drafter made measurably slow (a sleep in its pass) whose drafts the width rule would still verify (or,
    ``draft_gate`` alone, with no width rule): the gate turns most steps into plain ones, and the output is
    still the target's own."""
    import time

    prompts = _prompts(2)
    ref = [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in prompts]
    cfg = SpecConfig(method="dflash", enable_adaptive_verification=not alone, draft_gate=alone)
    engine = build_engine(tiny_target, cfg, random_draft(tiny_target, lilicorr=False))
    assert (engine.adaptive is None) == alone and engine.gate is not None
    if not alone:
        engine.adaptive.cost = CostModel(base=1.0, per_token=0.0)  # verify width looks free: the rule drafts fully
    slow = engine.drafter.block

    def sleepy(*args, **kwargs):
        time.sleep(0.1)
        return slow(*args, **kwargs)

    monkeypatch.setattr(engine.drafter, "block", sleepy)
    drafting_steps = []
    record = engine.gate.record
    monkeypatch.setattr(engine.gate, "record", lambda d, *a, **k: (drafting_steps.append(d), record(d, *a, **k)))
    reqs = engine.generate(_requests(prompts))
    assert [r.output_ids for r in reqs] == ref
    assert len(drafting_steps) >= 12 and sum(drafting_steps) <= len(drafting_steps) // 2
    assert engine.stats.num_paused_steps == drafting_steps.count(False) > 0


@torch.no_grad()
def test_paused_steps_defer_the_draft_context_exactly(tiny_target):
    """Steps the gate runs without the drafter keep their taps and fuse them in one pass before the drafter
    runs again: the draft context cache then holds the fused features of every committed position but the
    pending one — the same K/V as fusing the whole sequence's taps at once — and the output is the target's."""
    prompts = _prompts(2)
    ref = [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in prompts]
    engine = build_engine(tiny_target, SpecConfig(method="dflash", draft_gate=True), random_draft(tiny_target))
    pattern = iter([False, False, False, True, False, True, True, False, False] * 20)
    monkeypatch_gate = engine.gate
    monkeypatch_gate.should_draft = lambda: next(pattern)  # type: ignore[method-assign]
    reqs = _requests(prompts)
    engine.add(reqs)
    for _ in range(9):  # ends on a paused step: deferred taps are waiting
        engine.step()
    assert engine.drafter.deferred and engine.stats.num_paused_steps == 6
    engine._set_anchors(engine.drafter.fuse_deferred())
    lengths = engine.tstate.lengths
    assert engine.drafter.cache.valid.sum(1).tolist() == lengths.tolist()
    for row, r in enumerate(reqs):
        seq = torch.tensor([r.prompt_ids + r.output_ids[:-1]])  # every position but the pending token
        state = tiny_target.new_state(1)
        taps = tiny_target.forward(state, seq).taps
        cache, ctx = engine.drafter.context(
            taps, torch.zeros(1, dtype=torch.long), torch.ones(seq.shape, dtype=torch.bool)
        )
        cols = engine.drafter.cache.valid[row]
        for (k, v), (k1, v1) in zip(engine.drafter.cache.kv, cache.kv, strict=True):
            torch.testing.assert_close(k[row][:, cols], k1[0], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(v[row][:, cols], v1[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(engine.seqs[row].anchor, ctx[0, -1], atol=1e-5, rtol=1e-4)
    while engine.seqs:
        engine.step()
    assert [r.output_ids for r in reqs] == ref
