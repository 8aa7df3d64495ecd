"""Losslessness with the shipped, trained drafters on the shipped target (not only random ones):
trained drafters get long drafts accepted, which exercises the multi-token paths for real."""

from pathlib import Path

import pytest
import torch

from lilicorr.checkpoint import load_draft
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "tiny-s"
DRAFTS = [
    ROOT / "models" / n for n in ("tiny-s-dflash", "tiny-s-lilicorr", "tiny-s-dflash-long", "tiny-s-lilicorr-long")
]
PROMPTS = [
    "def parse_args(argv):\n    parser = argparse.ArgumentParser(",
    "The module provides functions for working with",
    "class Queue:\n    def __init__(self, maxsize=0):\n        self.maxsize",
    "=head1 DESCRIPTION\n\nThis function returns",
    "    for key, value in sorted(d.items()):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "Return a new list containing",
    "    if not isinstance(obj, str):\n        raise TypeError(",
]


@pytest.fixture(scope="module")
def shipped():
    missing = [p for p in [TARGET, *DRAFTS] if not (p / "config.json").exists()]
    if missing:
        pytest.skip(f"shipped models not present: {[str(m) for m in missing]}")
    target = TargetRuntime.load(TARGET)
    return target, {p.name: load_draft(p, target.model.config) for p in DRAFTS}


def _reqs(target):
    tok = target.tokenizer
    return [
        Request(
            tok.encode(p, add_special_tokens=False),
            SamplingParams(max_tokens=40),
            eos_ids=frozenset(target.eos_token_ids),
        )
        for p in PROMPTS
    ]


@pytest.mark.parametrize("batch", [1, 4])
def test_trained_drafters_are_lossless_at_t0(shipped, batch):
    target, drafts = shipped
    ref = _reqs(target)
    build_engine(target).generate(ref)
    for name, draft in drafts.items():
        for method in ["dflash", "lilicorr"] if draft.is_lilicorr else ["dflash"]:
            engine = build_engine(target, SpecConfig(method=method), draft)
            reqs = _reqs(target)
            for i in range(0, len(reqs), batch):
                engine.generate(reqs[i : i + batch])
            assert [r.output_ids for r in reqs] == [r.output_ids for r in ref], (name, method)
            assert engine.stats.tau > 1.2, (name, method, engine.stats.tau)  # trained: drafts do get accepted


def test_trained_lilicorr_sampling_runs_lossless_machinery(shipped):
    """T=1 with the probabilistic walk and both rejection methods: outputs are valid and seeded runs repeat."""
    target, drafts = shipped
    draft = drafts["tiny-s-lilicorr"]
    for rejection in ("standard", "block"):
        outs = []
        for _ in range(2):
            engine = build_engine(
                target, SpecConfig(draft_sample_method="probabilistic", rejection_sample_method=rejection), draft
            )
            reqs = [
                Request(r.prompt_ids, SamplingParams(max_tokens=24, temperature=1.0, seed=5)) for r in _reqs(target)[:3]
            ]
            engine.generate(reqs)
            outs.append([r.output_ids for r in reqs])
        assert outs[0] == outs[1]
        assert all(0 <= t < target.vocab_size for o in outs[0] for t in o)
    torch.manual_seed(0)
