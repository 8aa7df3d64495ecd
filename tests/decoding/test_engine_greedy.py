"""Greedy losslessness: every method emits exactly the target's own greedy tokens."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import ReferenceProposer, random_draft

NUM_PROMPTS = 50
MAX_TOKENS = 20


def _prompts(n=NUM_PROMPTS):
    g = torch.Generator().manual_seed(123)
    return [
        torch.randint(4, 1000, (int(torch.randint(1, 24, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]


def _requests(prompts, eos=frozenset({0}), **kw):
    return [
        Request(p, SamplingParams(max_tokens=MAX_TOKENS, **kw), id=str(i), eos_ids=eos) for i, p in enumerate(prompts)
    ]


@torch.no_grad()
def _greedy_no_cache(model, prompt, max_tokens, eos=0):
    """The plainest possible reference: a full forward per token, no cache, no batching."""
    seq, out = list(prompt), []
    while len(out) < max_tokens:
        tok = int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
        out.append(tok)
        seq.append(tok)
        if tok == eos:
            break
    return out


@pytest.fixture(scope="module")
def reference(tiny_target):
    return [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in _prompts()]


@pytest.fixture(scope="module")
def drafts(tiny_target):
    return {"dflash": random_draft(tiny_target, lilicorr=False), "lilicorr": random_draft(tiny_target, lilicorr=True)}


def _run(engine, prompts, batch):
    reqs = _requests(prompts)
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    return [r.output_ids for r in reqs]


def test_reference_has_no_trivial_outputs(reference):
    assert len({tuple(r) for r in reference}) > NUM_PROMPTS // 2
    assert sum(len(r) for r in reference) > NUM_PROMPTS * 5


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize(
    ("method", "sample"),
    [("dflash", "greedy"), ("dflash", "probabilistic"), ("lilicorr", "greedy"), ("lilicorr", "probabilistic")],
)
def test_greedy_identity_random_drafters(tiny_target, drafts, reference, method, sample, n, batch):
    draft = drafts[method]
    engine = build_engine(
        tiny_target, SpecConfig(method=method, num_speculative_tokens=n, draft_sample_method=sample), draft
    )
    assert _run(engine, _prompts(), batch) == reference
    assert engine.stats.num_drafts > 0 and engine.stats.num_draft_tokens == engine.stats.num_drafts * n


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_identity_ar_method(tiny_target, reference, batch):
    engine = build_engine(tiny_target)
    assert engine.method == "ar"
    assert _run(engine, _prompts(), batch) == reference


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("n", [1, 3, 4])
def test_greedy_identity_with_high_acceptance(tiny_target, drafts, reference, n, batch):
    """Multi-token acceptance paths (cache truncation, draft context with several rows)."""
    prompts = _prompts()
    reqs = _requests(prompts)
    refs = {id(r): reference[i] for i, r in enumerate(reqs)}
    engine = build_engine(
        tiny_target,
        SpecConfig(num_speculative_tokens=n),
        drafts["dflash"],
        proposer=ReferenceProposer(refs, tiny_target.vocab_size),
    )
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == reference
    if n > 1:
        assert engine.stats.tau > 1.5  # the double really does get accepted
    assert 0 < engine.stats.num_accepted_tokens < engine.stats.num_draft_tokens


def test_draft_stats_and_timing(tiny_target, drafts):
    engine = build_engine(tiny_target, SpecConfig(num_speculative_tokens=3), drafts["lilicorr"])
    reqs = engine.generate(_requests(_prompts(4)))
    total = sum(r.stats.num_drafts for r in reqs)
    assert total == engine.stats.num_drafts
    for r in reqs:
        st = r.stats
        assert st.tau == pytest.approx(1 + st.num_accepted_tokens / st.num_drafts)
        assert sum(st.acceptance_histogram) == st.num_drafts
        assert st.accepted_per_position[0] >= st.accepted_per_position[-1]
    t = engine.timer.as_dict()
    assert t["target_verify"] > 0 and t["draft_backbone"] > 0 and t["head"] > 0 and t["walk"] > 0


def test_requests_join_a_running_batch_and_cancel(tiny_target, drafts, reference):
    prompts = _prompts(6)
    engine = build_engine(tiny_target, SpecConfig(num_speculative_tokens=2), drafts["lilicorr"])
    reqs = _requests(prompts)
    engine.add(reqs[:2])
    engine.step()
    engine.add(reqs[2:5])
    engine.step()
    engine.cancel(reqs[3])
    while engine.seqs:
        engine.step()
    for i in (0, 1, 2, 4):
        assert reqs[i].output_ids == reference[i]
    assert not reqs[3].finished and reqs[3].output_ids == reference[3][: len(reqs[3].output_ids)]


def test_eos_stop_and_max_tokens_respected(tiny_target, drafts, reference):
    engine = build_engine(tiny_target, SpecConfig(num_speculative_tokens=4), drafts["dflash"])
    reqs = [Request(p, SamplingParams(max_tokens=3), eos_ids=frozenset({0})) for p in _prompts(8)]
    engine.generate(reqs)
    for r, ref in zip(reqs, reference, strict=False):
        assert r.output_ids == ref[:3] and r.finished


def test_bad_options_named(tiny_target, drafts):
    with pytest.raises(ValueError, match="num_speculative_tokens = 5: expected 1..4"):
        build_engine(tiny_target, SpecConfig(num_speculative_tokens=5), drafts["dflash"])
    with pytest.raises(ValueError, match="rejection_sample_method 'fast'"):
        build_engine(tiny_target, SpecConfig(rejection_sample_method="fast"), drafts["dflash"])
    with pytest.raises(ValueError, match="needs a LiLiCorrDraftModel"):
        build_engine(tiny_target, SpecConfig(method="lilicorr"), drafts["dflash"])
    with pytest.raises(ValueError, match="draft_sample_method 'beam'"):
        build_engine(tiny_target, SpecConfig(draft_sample_method="beam"), drafts["dflash"])


class SpyProposer(ReferenceProposer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []

    def propose(self, d, temperature, uniforms, timer):
        for row, req in enumerate(d.requests):
            self.calls.append((req, len(req.output_ids), d.hidden[row].clone(), d.anchor[row].clone()))
        return super().propose(d, temperature, uniforms, timer)


def test_draft_context_matches_from_scratch_recomputation(tiny_target, drafts, reference):
    """After accepted/rejected steps, the drafter sees exactly the fused features of the committed
    prefix (no stale rejected rows, no missing accepted rows) and the right anchor."""
    draft = drafts["lilicorr"]
    prompts = _prompts(3)
    reqs = _requests(prompts)
    spy = SpyProposer({id(r): reference[i] for i, r in enumerate(reqs)}, tiny_target.vocab_size)
    engine = build_engine(tiny_target, SpecConfig(num_speculative_tokens=4), draft, proposer=spy)
    engine.generate(reqs)
    n = 4
    checked = 0
    for req, done, hidden, anchor in spy.calls[3:]:
        seq = req.prompt_ids + req.output_ids[: done - 1]  # in the target cache; output[done-1] is pending
        out = tiny_target.model(input_ids=torch.tensor([seq]), output_hidden_states=True)
        taps = torch.cat([out.hidden_states[i + 1] for i in draft.cfg.target_layer_ids], -1)
        ctx = draft.fuse(taps)
        pos = torch.arange(len(seq))[None]
        block = torch.tensor([[req.output_ids[done - 1]] + [draft.cfg.mask_token_id] * n])
        want = draft.draft_block(
            tiny_target.embed_tokens(block),
            len(seq) + torch.arange(n + 1)[None],
            draft.context_kv(ctx, pos),
            torch.ones(1, len(seq), dtype=torch.bool),
        )[0, 1:]
        torch.testing.assert_close(hidden, want, atol=1e-4, rtol=0)
        torch.testing.assert_close(anchor, ctx[0, -1], atol=1e-4, rtol=0)
        checked += 1
    assert checked >= 5
