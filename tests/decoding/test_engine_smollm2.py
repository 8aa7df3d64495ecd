"""Losslessness of the shipped SmolLM2 drafters (DFlash, LiLiCorr, LiLiCorr + DFlash2 convolution) on the real
default target, under its chat template."""

from pathlib import Path

import pytest

from lilicorr.checkpoint import load_draft
from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "smollm2-135m-instruct"  # built by `make target` (make test depends on it)
DRAFTS = [ROOT / "models" / n for n in ("smollm2-dflash", "smollm2-lilicorr", "smollm2-lilicorr-conv")]
# Four MT-Bench turn-1 questions (writing, coding, stem, math), as `lilicorr data prompts mt-bench` writes them.
MT_BENCH = [
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences and "
    "must-see attractions.",
    "Implement a function to find the median of two sorted arrays of different sizes with O(1) space complexity "
    "and O(n) time complexity.",
    "In the field of quantum physics, what is superposition, and how does it relate to the phenomenon of quantum "
    "entanglement?",
    "Some people got on a bus at the terminal. At the first bus stop, half of the people got down and 4 more "
    "people got in. Then at the second bus stop, 6 people got down and 8 more got in. If there were a total of "
    "25 people heading to the third stop, how many people got on the bus at the terminal?",
]


@pytest.fixture(scope="module")
def smollm2():
    if not (TARGET / "config.json").exists():
        pytest.fail(f"{TARGET} missing: `make target` builds it")
    missing = [p for p in DRAFTS if not (p / "config.json").exists()]
    if missing:
        pytest.skip(f"SmolLM2 drafters not shipped in this checkout: {[p.name for p in missing]}")
    target = TargetRuntime.load(TARGET)
    return target, {p.name: load_draft(p, target.model.config) for p in DRAFTS}


def _reqs(target):
    return [
        Request(
            row_ids(target.tokenizer, {"messages": [{"role": "user", "content": q}]}),
            SamplingParams(max_tokens=32),
            eos_ids=frozenset(target.eos_token_ids),
        )
        for q in MT_BENCH
    ]


@pytest.mark.slow  # 187 s on 2 loaded cores: plain decoding and 5 drafter runs on the real target; the default
# configuration's identity test below stays in `make test`
def test_shipped_smollm2_drafters_are_lossless_at_t0(smollm2):
    target, drafts = smollm2
    ref = build_engine(target).generate(_reqs(target))
    assert all(len(r.output_ids) == 32 for r in ref)  # real answers, not an immediate EOS
    for name, draft in drafts.items():
        for method in ["dflash", "lilicorr"] if draft.is_lilicorr else ["dflash"]:
            engine = build_engine(target, SpecConfig(method=method), draft)
            reqs = engine.generate(_reqs(target)[:2]) + engine.generate(_reqs(target)[2:])  # batch 2
            assert [r.output_ids for r in reqs] == [r.output_ids for r in ref], (name, method)
            assert engine.stats.tau > 1.1, (
                name,
                method,
                engine.stats.tau,
            )  # trained: drafts do get accepted (random: 1.0)


def test_the_default_configuration_is_lossless_on_smollm2(smollm2):
    """`generate --draft` / `make run` / `serve`'s default (methods.FASTEST: the LiLiCorr tree with the
    prompt-lookup graft) gives the target's own greedy text on the real target (fp32), batch 1 and 2."""
    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.config import default_config, parse_speculative_config

    target, drafts = smollm2
    ref = build_engine(target).generate(_reqs(target))
    spec = parse_speculative_config(default_config("models/smollm2-lilicorr"))
    engine = build_engine(target, spec, drafts["smollm2-lilicorr"])
    reqs = engine.generate(_reqs(target)[:1]) + engine.generate(_reqs(target)[1:3]) + engine.generate(_reqs(target)[3:])
    assert [r.output_ids for r in reqs] == [r.output_ids for r in ref]
    # The draft gate decides from this machine's timings how often the drafter runs (where drafting loses it
    # probes only a few times); with it held open every step drafts, and the trained drafter's trees are accepted.
    engine = build_engine(target, spec, drafts["smollm2-lilicorr"])
    engine.gate.should_draft = lambda: True
    reqs = engine.generate(_reqs(target)[:2]) + engine.generate(_reqs(target)[2:])
    assert [r.output_ids for r in reqs] == [r.output_ids for r in ref]
    assert engine.stats.num_paused_steps == 0 and engine.stats.tau > 1.3, engine.stats.tau
