"""Prompt-lookup (ngram) drafting: the lookup rule, greedy identity and exact sampling."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.methods.ngram import NgramProposer, lookup
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.test_engine_greedy import _greedy_no_cache
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value, sample_counts


def test_lookup_takes_the_longest_suffix_and_its_latest_occurrence():
    h = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    assert lookup(h, 2, 4, 1) == [7, 5]  # suffix [1, 2, 3]: latest earlier occurrence at 4 → 7, 5
    assert lookup([5, 6, 5], 3, 2, 1) == [6, 5, 5]  # short continuation padded with its last token
    assert lookup([1, 2, 3, 4], 2, 3, 1) is None
    assert lookup([4, 4], 2, 3, 2) is None  # a one-token match is below prompt_lookup_min
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        NgramProposer(3, prompt_lookup_max=1, prompt_lookup_min=2)


@pytest.mark.parametrize("batch", [1, 4])
def test_ngram_greedy_identity_and_acceptance(tiny_target, batch):
    g = torch.Generator().manual_seed(5)
    base = [torch.randint(4, 300, (6,), generator=g).tolist() for _ in range(12)]
    prompts = [b * 3 for b in base]  # repetitive prompts: lookups do match
    ref = [_greedy_no_cache(tiny_target.model, p, 24) for p in prompts]
    engine = build_engine(
        tiny_target, SpecConfig(method="ngram", num_speculative_tokens=3, options={"prompt_lookup_max": 3})
    )
    assert engine.method == "ngram"
    reqs = [Request(p, SamplingParams(max_tokens=24), id=str(i), eos_ids=frozenset({0})) for i, p in enumerate(prompts)]
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == ref
    assert engine.stats.num_drafts > 0 and engine.stats.num_draft_tokens == 3 * engine.stats.num_drafts


def test_ngram_sampling_matches_target(small_vocab_target):
    cfg = SpecConfig(method="ngram", num_speculative_tokens=2, options={"prompt_lookup_max": 2})
    counts, engine = sample_counts(small_vocab_target, None, cfg, {"temperature": 1.0})
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) > ALPHA
    assert engine.stats.num_accepted_tokens > 0  # V = 6: lookups match and get accepted
