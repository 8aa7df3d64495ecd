"""Sampling losslessness: the first three emitted tokens are distributed exactly as target sampling.

A tiny-vocabulary target (V = 6) makes the exact joint distribution of three tokens (216 cells)
enumerable, and lets 4000 samples per configuration run in seconds. Each configuration is a
chi-square goodness-of-fit test at significance 1e-3 (cells with expected count < 5 pooled), so
with the fixed seeds used here a correct engine fails with probability ≤ 1e-3 per configuration.
A deliberately broken verifier (accepting every draft) must fail the same test: the test of the test.
"""

import itertools

import pytest
import torch
from scipy.stats import chi2

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams, sample_from, target_probs
from lilicorr.decoding.verify import Verdict, Verifier
from tests.decoding.engine_helpers import random_draft

V = 6
SAMPLES = 4000
ALPHA = 1e-3
PROMPT = [1, 4, 2, 5]


def exact_distribution(target, params):
    seqs = [PROMPT + [a, b] for a, b in itertools.product(range(V), range(V))]
    with torch.no_grad():
        logits = target.model(input_ids=torch.tensor(seqs)).logits.float()  # [36, len, V]
    p1 = target_probs(logits[0, len(PROMPT) - 1], params)
    p = torch.zeros(V, V, V)
    for idx, (a, b) in enumerate(itertools.product(range(V), range(V))):
        p2 = target_probs(logits[idx, len(PROMPT)], params)[b]
        p3 = target_probs(logits[idx, len(PROMPT) + 1], params)
        p[a, b] = p1[a] * p2 * p3
    return p.flatten()


def sample_counts(target, draft, cfg, params, draft_dir=None, verifier=None):
    """4000 samples of three tokens from the engine the registry builds for ``cfg``."""
    engine = build_engine(target, cfg, draft, draft_dir, verifier=verifier)
    counts = torch.zeros(V**3)
    for chunk in range(0, SAMPLES, 1000):
        reqs = [
            Request(list(PROMPT), SamplingParams(max_tokens=3, seed=chunk + i, **params), eos_ids=frozenset())
            for i in range(1000)
        ]
        engine.generate(reqs)
        for r in reqs:
            a, b, c = r.output_ids[:3]
            counts[a * V * V + b * V + c] += 1
    return counts, engine


def p_value(counts, probs):
    expected = probs * counts.sum()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    if bool((obs[~keep] > 0).any()):
        return 0.0  # a sample the target can never produce
    return float(chi2.sf(stat, int(keep.sum()) - 1))


CONFIGS = [
    ("dflash", "greedy", "standard", 2),
    ("dflash", "probabilistic", "standard", 2),
    ("lilicorr", "greedy", "standard", 2),
    ("lilicorr", "probabilistic", "standard", 2),
    ("dflash", "greedy", "block", 2),
    ("dflash", "probabilistic", "block", 2),
    ("lilicorr", "greedy", "block", 2),
    ("lilicorr", "probabilistic", "block", 3),
    ("lilicorr", "probabilistic", "standard", 1),
    ("ar", "greedy", "standard", 0),
]


@pytest.mark.parametrize(("method", "sample", "rejection", "n"), CONFIGS)
def test_first_three_tokens_match_target_sampling(small_vocab_target, method, sample, rejection, n):
    draft = None if method == "ar" else random_draft(small_vocab_target, lilicorr=method == "lilicorr", block=4, k=4)
    params = {"temperature": 1.0}
    cfg = SpecConfig(
        method=method, num_speculative_tokens=n or None, draft_sample_method=sample, rejection_sample_method=rejection
    )
    counts, engine = sample_counts(small_vocab_target, draft, cfg, params)
    pv = p_value(counts, exact_distribution(small_vocab_target, SamplingParams(**params)))
    assert pv > ALPHA, f"p = {pv:.2e}"
    if method != "ar":  # the drafts are really being accepted and rejected
        assert 0 < engine.stats.num_accepted_tokens < engine.stats.num_draft_tokens


@pytest.mark.parametrize("params", [{"temperature": 0.7, "top_k": 3}, {"temperature": 1.3, "top_p": 0.8}])
def test_processed_distribution_is_respected(small_vocab_target, params):
    draft = random_draft(small_vocab_target, lilicorr=True, block=4, k=4)
    cfg = SpecConfig(num_speculative_tokens=2, draft_sample_method="probabilistic")
    counts, _ = sample_counts(small_vocab_target, draft, cfg, params)
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(**params))) > ALPHA


class AcceptAll(Verifier):
    """A lossy chain rule: every draft accepted without the ratio test."""

    def accept(self, drafts, p, q, gen):
        n = len(drafts)
        return Verdict(list(range(n + 1)), drafts.tolist() + [sample_from(p[n], gen)])


def test_broken_verifier_is_caught(small_vocab_target):
    """Accepting every draft without the ratio test must fail the same statistical test."""
    draft = random_draft(small_vocab_target, lilicorr=True, block=4, k=4)
    cfg = SpecConfig(num_speculative_tokens=2, draft_sample_method="probabilistic")
    counts, _ = sample_counts(small_vocab_target, draft, cfg, {"temperature": 1.0}, verifier=AcceptAll())
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) < ALPHA
