"""The drafter's inference vocabulary (``draft_vocab_size``): drafts come only from the folder's most
frequent tokens, the restricted head equals the full head on them, and every method stays lossless
(greedy identity; the exact sampling distribution when some tokens can never be drafted)."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig, parse_speculative_config
from lilicorr.decoding.draft_vocab import (
    OUTSIDE,
    VocabHead,
    read_draft_vocab,
    token_frequency_order,
    write_draft_vocab,
)
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import MAX_TOKENS, _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value, sample_counts


def test_frequency_order_and_file_round_trip(tmp_path):
    order, total = token_frequency_order([[5, 3, 5, 9], [3, 5], []], vocab_size=10)
    assert order == [5, 3, 9] and total == 6  # 5 three times, 3 twice, 9 once
    write_draft_vocab(tmp_path, order, {"data": ["x"]})
    assert read_draft_vocab(tmp_path, 2, 10).tolist() == [3, 5]  # the two most frequent, ascending
    with pytest.raises(ValueError, match="lists 3 token ids"):
        read_draft_vocab(tmp_path, 4, 10)
    with pytest.raises(ValueError, match="0..7"):
        read_draft_vocab(tmp_path, 3, 8)  # id 9 is not in an 8-token vocabulary
    with pytest.raises(ValueError, match="lilicorr data draft-vocab"):
        read_draft_vocab(tmp_path / "none", 2, 10)
    with pytest.raises(ValueError, match="out of range"):
        token_frequency_order([[1, 12]], vocab_size=10)
    with pytest.raises(ValueError, match="non-negative integer"):
        parse_speculative_config({"method": "dflash", "model": "x", "draft_vocab_size": -1})
    assert parse_speculative_config({"method": "dflash", "model": "x", "draft_vocab_size": 64}).draft_vocab_size == 64


def test_restricted_head_equals_the_full_head_on_its_tokens():
    g = torch.Generator().manual_seed(0)
    weight, hidden = torch.randn(50, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    ids = torch.tensor([1, 4, 7, 30])
    full = hidden @ weight.T  # [2, 3, 50]
    part = VocabHead(weight, ids)(hidden)
    torch.testing.assert_close(part[..., ids], full[..., ids])
    others = torch.ones(50, dtype=torch.bool)
    others[ids] = False
    assert bool((part[..., others] == OUTSIDE).all())
    probs = torch.softmax(part / 0.01, -1)  # a low temperature: still exact zeros, no NaN in p·log p
    assert bool((probs[..., others] == 0).all()) and torch.isfinite((probs * probs.clamp_min(1e-30).log()).sum())


def _vocab_dir(tmp_path, ids):
    write_draft_vocab(tmp_path, list(ids), {"test": True})
    return tmp_path


@pytest.mark.parametrize(
    "method, lilicorr, options, adaptive",
    [
        ("dflash", False, {}, False),
        ("lilicorr", True, {}, False),
        ("ddtree", False, {"tree_budget": 9}, False),
        ("lilicorr-tree", True, {"tree_budget": 9}, True),
    ],
)
def test_greedy_identity_with_a_draft_vocabulary(tiny_target, tmp_path, method, lilicorr, options, adaptive):
    prompts = _prompts(6)
    ref = [_greedy_no_cache(tiny_target.model, p, MAX_TOKENS) for p in prompts]
    # the drafter's vocabulary: the tokens the target itself emits on these prompts, plus other ids
    emitted = sorted({t for r in ref for t in r})
    ids = emitted + [t for t in range(tiny_target.vocab_size) if t not in set(emitted)][:64]
    cfg = SpecConfig(method=method, options=options, enable_adaptive_verification=adaptive, draft_vocab_size=len(ids))
    draft = random_draft(tiny_target, lilicorr=lilicorr)
    engine = build_engine(tiny_target, cfg, draft, _vocab_dir(tmp_path, ids))
    drafted: list[int] = []
    propose = engine.proposer.propose

    def spy(*args, **kwargs):
        p = propose(*args, **kwargs)
        drafted.extend(p.tokens.flatten().tolist())
        return p

    engine.proposer.propose = spy
    if engine.gate is not None:
        engine.gate = None  # every step drafts
    reqs = engine.generate(_requests(prompts))
    assert [r.output_ids for r in reqs] == ref
    assert drafted and set(drafted) <= set(ids)  # only the vocabulary's tokens are ever drafted


def test_sampling_is_exact_when_some_tokens_cannot_be_drafted(small_vocab_target, tmp_path):
    """T = 1, the probabilistic walk, a drafter that can draft 4 of the 6 tokens: the joint distribution of
    the first three tokens is still the target's (chi-square)."""
    draft = random_draft(small_vocab_target, lilicorr=True, block=4, k=4)
    cfg = SpecConfig(num_speculative_tokens=3, draft_sample_method="probabilistic", draft_vocab_size=4)
    params = {"temperature": 1.0}
    folder = _vocab_dir(tmp_path, [0, 2, 3, 5, 1, 4])
    counts, engine = sample_counts(small_vocab_target, draft, cfg, params, draft_dir=folder)
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(**params))) > ALPHA
    assert 0 < engine.stats.num_accepted_tokens < engine.stats.num_draft_tokens
