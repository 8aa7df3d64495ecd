"""Prefill groups: a long prompt is prefilled apart from short ones, and the output stays the target's own."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.prefill import prefill_groups
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import random_draft


def _padded(lengths, groups):
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


def test_one_long_prompt_is_prefilled_alone():
    lengths = [40] * 15 + [3000]
    groups = prefill_groups(lengths)
    assert [15] in groups and sorted(i for g in groups for i in g) == list(range(16))
    assert _padded(lengths, groups) == 3000 + 15 * 40  # one forward of 15 × 40, one of 1 × 3000: no padding
    assert _padded(lengths, [list(range(16))]) == 16 * 3000  # what a single forward cost


@pytest.mark.parametrize("seed", range(5))
def test_padding_is_bounded_and_every_prompt_is_prefilled_once(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 2000, (40,), generator=g).tolist()
    groups = prefill_groups(lengths, slack=0.25, free_pad=16, max_tokens=8192)
    assert sorted(i for grp in groups for i in grp) == list(range(40))
    for grp in groups:
        width, real = max(lengths[i] for i in grp), sum(lengths[i] for i in grp)
        assert len(grp) == 1 or len(grp) * width <= min(1.25 * real + 16 * len(grp), 8192)
    assert len(groups) < 40  # similar lengths still share a forward


def test_near_equal_short_prompts_share_one_forward():
    assert prefill_groups([5, 9, 12, 7]) == [[0, 3, 1, 2]]
    assert prefill_groups([]) == []


@pytest.mark.parametrize("method", ["dflash", "lilicorr", "ar"])
def test_mixed_lengths_keep_greedy_identity(tiny_target, method):
    """Prompts of 2–120 tokens joined at once (several prefill forwards, then one batch) give exactly each
    prompt's greedy output decoded alone, and no prefill forward is padded beyond its group's bound."""
    g = torch.Generator().manual_seed(7)
    lengths = [2, 120, 3, 90, 5, 118, 4]
    prompts = [torch.randint(4, 1000, (n,), generator=g).tolist() for n in lengths]
    draft = None if method == "ar" else random_draft(tiny_target, lilicorr=method == "lilicorr")

    def run(batch):
        spec = SpecConfig(num_speculative_tokens=3)
        engine = build_engine(tiny_target) if draft is None else build_engine(tiny_target, spec, draft)
        widths = []
        forward = engine.target.forward

        def spy(state, ids, mask, **kw):
            widths.append(tuple(ids.shape))
            return forward(state, ids, mask, **kw)

        engine.target.forward = spy
        reqs = [Request(p, SamplingParams(max_tokens=12), eos_ids=frozenset({0})) for p in batch]
        engine.add(reqs)
        prefills = list(widths)
        engine.target.forward = forward
        while engine.seqs:
            engine.step()
        return [r.output_ids for r in reqs], prefills

    alone = [run([p])[0][0] for p in prompts]
    together, prefills = run(prompts)
    assert together == alone
    assert len(prefills) > 1 and sum(b * w for b, w in prefills) <= 1.25 * sum(lengths) + 16 * len(lengths)
