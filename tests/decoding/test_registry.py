"""Every registered method through the one factory: greedy identity, exact sampling, named option errors,
and a method added from outside the package (one class + ``@register``) running unchanged."""

import pytest
import torch

from lilicorr.checkpoint import save_draft
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.methods import METHODS, Method, get_method, method_names, register
from lilicorr.decoding.proposal import Proposer
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.models.arms import ARM_KINDS, build_arm, save_arm
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value, sample_counts

LILICORR_METHODS = ("lilicorr", "lilicorr-tree", "oracle")


def _draft_for(method, target, tmp_path, block=5):
    """(draft model, draft folder) that ``method`` runs on: none, DFlash, LiLiCorr, or DFlash + an arm."""
    if not get_method(method).needs_draft:
        return None, None
    draft = random_draft(target, lilicorr=method in LILICORR_METHODS, block=block, k=4)
    if method not in ARM_KINDS:
        return draft, None
    folder = tmp_path / method
    save_draft(draft, folder, dtype=torch.float32)
    torch.manual_seed(1)
    arm = build_arm(method, target.vocab_size, target.hidden_size, rank=8, k=4)
    with torch.no_grad():
        for p in arm.parameters():
            p.normal_(0, 0.5)
    save_arm(arm, folder, {"vocab": target.vocab_size, "hidden": target.hidden_size, "rank": 8, "k": 4})
    return draft, folder


def test_the_builtin_methods_are_registered():
    expected = {"ar", "ngram", "dflash", "lilicorr", "ddtree", "lilicorr-tree", "oracle", *ARM_KINDS}
    assert expected <= set(method_names())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_is_greedy_lossless(tiny_target, method, tmp_path):
    prompts = _prompts(8)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    draft, folder = _draft_for(method, tiny_target, tmp_path)
    reqs = _requests(prompts)
    extras = {"references": {id(r): ref[i] for i, r in enumerate(reqs)}}
    engine = build_engine(tiny_target, SpecConfig(method=method), draft, folder, extras=extras)
    assert engine.method == method
    for i in range(0, len(reqs), 4):
        engine.generate(reqs[i : i + 4])
    assert [r.output_ids for r in reqs] == ref
    if not get_method(method).baseline:
        assert engine.stats.num_draft_tokens > 0


@pytest.mark.parametrize("method", [m for m in sorted(METHODS) if not get_method(m).needs_reference])
def test_every_method_samples_exactly(small_vocab_target, method, tmp_path):
    draft, folder = _draft_for(method, small_vocab_target, tmp_path, block=4)
    sample = "greedy" if get_method(method).baseline else "probabilistic"
    cfg = SpecConfig(method=method, num_speculative_tokens=2, draft_sample_method=sample)
    counts, engine = sample_counts(small_vocab_target, draft, cfg, {"temperature": 1.0}, draft_dir=folder)
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) > ALPHA


def test_options_are_checked_by_their_method(tiny_target):
    with pytest.raises(ValueError, match="method 'dflash' has no option 'tree_budget'"):
        build_engine(tiny_target, SpecConfig(method="dflash", options={"tree_budget": 4}), random_draft(tiny_target))
    with pytest.raises(ValueError, match="'tree_budget' must be a positive integer"):
        build_engine(tiny_target, SpecConfig(method="ddtree", options={"tree_budget": 0}), random_draft(tiny_target))
    with pytest.raises(ValueError, match="'tree_budget' must be a positive integer or 'auto' \\(at least 2"):
        build_engine(tiny_target, SpecConfig(method="ddtree", options={"tree_budget": 1}), random_draft(tiny_target))
    with pytest.raises(ValueError, match="method 'lilicorr' needs 'model'"):
        build_engine(tiny_target, SpecConfig(method="lilicorr"))
    with pytest.raises(ValueError, match="unknown method 'eagle'"):
        build_engine(tiny_target, SpecConfig(method="eagle"))


def test_a_method_added_from_outside_runs_unchanged(tiny_target):
    """Adding a method is one class: here, a proposer that drafts the pending token repeated."""

    class RepeatProposer(Proposer):
        name, needs_draft, n = "repeat", False, 3

        def propose(self, d, temperature, uniforms, timer):
            return self.one_hot_chain(d.anchor_tokens[:, None].repeat(1, self.n))

    @register
    class Repeat(Method):
        name, needs_draft, help = "repeat", False, "test double"

        @classmethod
        def build(cls, ctx):
            return RepeatProposer()

    try:
        prompts = _prompts(4)
        ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
        engine = build_engine(tiny_target, SpecConfig(method="repeat"))
        reqs = engine.generate(_requests(prompts))
        assert [r.output_ids for r in reqs] == ref and engine.stats.num_draft_tokens > 0
    finally:
        del METHODS["repeat"]
