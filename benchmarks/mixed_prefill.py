"""A batch of short prompts with one long one: prefill in length groups (the engine's way) against one
padded forward (its way before ``decoding/prefill.py``).

The serving benchmark's high-concurrency levels mixed prompts of tens and thousands of tokens, and one padded
prefill made every short request cost as much as the long one. This times the same static batch both ways,
interleaved, with the engine the server uses: the prefill (``engine.add``) and the whole batch to its last token.

    python benchmarks/mixed_prefill.py --target models/smollm2-135m-instruct --draft models/smollm2-lilicorr
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.decoding import engine as engine_mod
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def one_forward(lengths: list[int]) -> list[list[int]]:
    """The old plan: every joining prompt in one forward."""
    return [list(range(len(lengths)))] if lengths else []


def run(target, draft, prompts, max_tokens: int, grouped: bool) -> tuple[float, float, int]:
    engine = build_engine(target, SpecConfig(), draft) if draft is not None else build_engine(target)
    reqs = [Request(list(p), SamplingParams(max_tokens=max_tokens, ignore_eos=True)) for p in prompts]
    plan = engine_mod.prefill_groups if grouped else one_forward
    with mock.patch.object(engine_mod, "prefill_groups", plan, create=True):  # create: an engine before the groups
        t0 = time.perf_counter()
        engine.add(reqs)
        t1 = time.perf_counter()
        while engine.seqs:
            engine.step()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t0, sum(len(r.output_ids) for r in reqs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default=None, help="a drafter folder (default: plain decoding)")
    ap.add_argument("--short", type=int, default=15, help="how many short prompts")
    ap.add_argument("--short-len", type=int, default=48)
    ap.add_argument("--long-len", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plans", nargs="+", choices=["one", "groups"], default=["one", "groups"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(args.target, dtype=dtype)
    draft = load_draft(args.draft, target.model.config, dtype=dtype) if args.draft else None
    g = torch.Generator().manual_seed(0)
    lengths = [args.short_len] * args.short + [args.long_len]
    prompts = [torch.randint(4, target.vocab_size, (n,), generator=g).tolist() for n in lengths]
    print(f"target {args.target} ({dtype}), drafter {args.draft}, prompts {args.short} x {args.short_len} + 1 x "
          f"{args.long_len}, {args.max_tokens} tokens each, {args.threads} threads")  # fmt: skip
    plans = [p == "groups" for p in args.plans]
    runs: dict[bool, list[tuple[float, float, int]]] = {g: [] for g in plans}
    run(target, draft, prompts[:2], 4, plans[0])  # warm-up
    for r in range(args.repeats):
        for grouped in plans if r % 2 == 0 else plans[::-1]:  # interleaved, the order alternating
            runs[grouped].append(run(target, draft, prompts, args.max_tokens, grouped))
    print("plan          prefill_s  batch_s  tokens/s")
    for grouped, name in ((g, "length groups" if g else "one forward") for g in plans):
        pre = statistics.median(x[0] for x in runs[grouped])
        tot = statistics.median(x[1] for x in runs[grouped])
        print(f"{name:13s} {pre:9.2f} {tot:8.2f} {runs[grouped][0][2] / tot:9.1f}")


if __name__ == "__main__":
    main()
