"""``benchmarks/engine_under_load.py``: the plain and the speculative engine serve the same workload interleaved
iteration by iteration — the property its ratio rests on — and the speculative one stays lossless doing so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import _greedy_no_cache, _prompts

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("engine_under_load", ROOT / "benchmarks" / "engine_under_load.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_both_engines_serve_the_same_requests_interleaved(tiny_target):
    bench = _bench()
    prompts = _prompts(6)
    lengths = [10 - (7 * i) % 5 for i in range(len(prompts))]  # spread, as the benchmark's workload spreads them
    ref = [_greedy_no_cache(tiny_target.model, p, n) for p, n in zip(prompts, lengths, strict=True)]

    def make() -> list[Request]:
        return [
            Request(p, SamplingParams(max_tokens=n), id=str(i), eos_ids=frozenset({0}))
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
        ]

    spec = build_engine(tiny_target, SpecConfig(method="dflash"), random_draft(tiny_target, lilicorr=False))
    spec.use_load_policy(batches=(1, 2))
    engines = {"plain": build_engine(tiny_target), "spec": spec}
    arms = bench.interleaved(engines, make, concurrency=2)
    for name, arm in arms.items():
        assert arm.done and [r.output_ids for r in arm.requests] == ref, name  # greedy: both the target's own
        assert arm.seconds > 0 and arm.rate > 0 and len(arm.prefill) >= 3  # 6 requests, at most 2 at a time
        assert sum(len(v) for v in arm.undrafted.values()) + len(arm.drafting) == arm.steps
    assert "plain" in bench.step_report("plain", arms["plain"])
