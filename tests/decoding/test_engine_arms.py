"""The comparison arms are lossless through the same engine: greedy identity and exact sampling."""

import pytest
import torch

from lilicorr.checkpoint import save_draft
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.models.arms import ARM_KINDS, build_arm, save_arm
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


def _arm_folder(tmp_path, target, draft, kind, seed=0):
    """A drafter folder with a comparison arm beside it (arm.json), as training writes it."""
    folder = tmp_path / kind
    save_draft(draft, folder, dtype=torch.float32)
    save_arm(
        _arm(kind, target, seed), folder, {"vocab": target.vocab_size, "hidden": target.hidden_size, "rank": 8, "k": 4}
    )
    return folder


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ARM_KINDS)
def test_arms_greedy_identity(tiny_target, kind, batch, tmp_path):
    prompts = _prompts(12)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    draft = random_draft(tiny_target, lilicorr=False)
    folder = _arm_folder(tmp_path, tiny_target, draft, kind)
    cfg = SpecConfig(num_speculative_tokens=3, draft_sample_method="probabilistic")
    engine = build_engine(tiny_target, cfg, draft, folder)  # the folder's arm.json decides the method
    reqs = _requests(prompts)
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == ref
    assert engine.method == kind


@pytest.mark.parametrize("rejection", ["standard", "block"])
@pytest.mark.parametrize("kind", ARM_KINDS)
def test_arms_sampling_matches_target(small_vocab_target, kind, rejection, tmp_path):
    draft = random_draft(small_vocab_target, lilicorr=False, block=4, k=4)
    folder = _arm_folder(tmp_path, small_vocab_target, draft, kind, seed=1)
    cfg = SpecConfig(
        method=kind, num_speculative_tokens=2, draft_sample_method="probabilistic", rejection_sample_method=rejection
    )
    counts, engine = sample_counts(small_vocab_target, draft, cfg, {"temperature": 1.0}, draft_dir=folder)
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) > ALPHA
    assert 0 < engine.stats.num_accepted_tokens < engine.stats.num_draft_tokens


def test_an_arm_method_needs_its_arm(tiny_target, tmp_path):
    draft = random_draft(tiny_target, lilicorr=False)
    folder = _arm_folder(tmp_path, tiny_target, draft, "dspark")
    with pytest.raises(ValueError, match="no domino arm"):
        build_engine(tiny_target, SpecConfig(method="domino"), draft, folder)
