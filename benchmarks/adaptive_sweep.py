"""Adaptive verification against full-block verification and AR, across concurrency (greedy, SmolLM2).

For each concurrency c: c MT-Bench chat prompts decoded together (one batch), tokens/s of AR, the
LiLiCorr chain verifying every draft, and the same with adaptive verification; τ, tokens verified per
proposed, and the adaptive calibration (predicted vs realised acceptance per position) at the end.

    python benchmarks/adaptive_sweep.py --concurrency 1 4 16 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.data.chat import row_ids
from lilicorr.data.prompt_sets import load_set
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET


def run(engine, prompts: list[list[int]], max_tokens: int, eos) -> tuple[float, list[list[int]]]:
    reqs = [Request(list(p), SamplingParams(max_tokens=max_tokens, ignore_eos=True), eos_ids=eos) for p in prompts]
    t0 = time.perf_counter()
    engine.generate(reqs)
    dt = time.perf_counter() - t0
    return sum(len(r.output_ids) for r in reqs) / dt, [r.output_ids for r in reqs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--draft", default=SHIPPED_DRAFT)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(SHIPPED_TARGET, dtype=dtype)
    draft = load_draft(args.draft, target.model.config, dtype=dtype)
    eos = frozenset(target.eos_token_ids)
    rows = load_set("mt-bench")
    prompts = [row_ids(target.tokenizer, r) for r in rows[::10] + rows[1::10]]
    adaptive = build_engine(target, SpecConfig(enable_adaptive_verification=True), draft, args.draft)
    cost = adaptive.adaptive.cost
    print(
        f"{args.draft}, dtype {dtype}; measured verify cost: {1000 * cost.base:.1f} ms + "
        f"{1000 * cost.per_token:.2f} ms per (row × token)"
    )
    print("| concurrency | AR tok/s | chain tok/s | chain τ | adaptive tok/s | adaptive τ | verified / proposed |")
    print("|---|---|---|---|---|---|---|")
    for c in args.concurrency:
        batch = [prompts[i % len(prompts)] for i in range(c)]
        ar_tps, ar_out = run(build_engine(target), batch, args.max_tokens, eos)
        chain = build_engine(target, SpecConfig(), draft, args.draft)
        chain_tps, chain_out = run(chain, batch, args.max_tokens, eos)
        adaptive.stats = type(adaptive.stats)()
        ad_tps, ad_out = run(adaptive, batch, args.max_tokens, eos)
        st = adaptive.stats
        ratio = st.num_draft_tokens / max(1, st.num_proposed_tokens)
        print(
            f"| {c} | {ar_tps:.1f} | {chain_tps:.1f} ({chain_tps / ar_tps:.2f}×) | {chain.stats.tau:.3f} | "
            f"{ad_tps:.1f} ({ad_tps / ar_tps:.2f}×) | {st.tau:.3f} | {ratio:.2f} |",
            flush=True,
        )
    print("calibration:", json.dumps(adaptive.adaptive.calibration()))


if __name__ == "__main__":
    main()
