"""The comparison arms are lossless through the same engine: greedy identity and exact sampling."""

import pytest
import torch

from lilicorr.decoding.engine import SpecConfig, SpecEngine
from lilicorr.decoding.proposers import ArmProposer
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.models.arms import ARM_KINDS, build_arm
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value, sample_counts


def _arm(kind, target, seed=0):
    torch.manual_seed(seed)
    arm = build_arm(kind, target.vocab_size, target.hidden_size, rank=8, k=4)
    with torch.no_grad():  # non-trivial weights: the arm really changes the drafts
        for p in arm.parameters():
            p.normal_(0, 0.5)
    return arm.eval()


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ARM_KINDS)
def test_arms_greedy_identity(tiny_target, kind, batch):
    prompts = _prompts(12)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    draft = random_draft(tiny_target, lilicorr=False)
    engine = SpecEngine(
        tiny_target,
        draft,
        SpecConfig(num_speculative_tokens=3),
        proposer=ArmProposer(_arm(kind, tiny_target), tiny_target.embed_tokens, "probabilistic"),
    )
    reqs = _requests(prompts)
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == ref
    assert engine.method == kind


@pytest.mark.parametrize("rejection", ["standard", "block"])
@pytest.mark.parametrize("kind", ARM_KINDS)
def test_arms_sampling_matches_target(small_vocab_target, kind, rejection):
    draft = random_draft(small_vocab_target, lilicorr=False, block=4, k=4)
    arm = _arm(kind, small_vocab_target, seed=1)
    cfg = SpecConfig(num_speculative_tokens=2, draft_sample_method="probabilistic", rejection_sample_method=rejection)
    original = SpecEngine.__init__

    def init(self, target, draft_model=None, config=None, proposer=None):
        original(self, target, draft_model, config, proposer=ArmProposer(arm, target.embed_tokens, "probabilistic"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SpecEngine, "__init__", init)
        counts, engine = sample_counts(small_vocab_target, draft, cfg, {"temperature": 1.0})
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) > ALPHA
    assert 0 < engine.stats.num_accepted_tokens < engine.stats.num_draft_tokens
