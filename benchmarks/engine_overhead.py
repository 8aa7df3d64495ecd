"""Where the draft–verify cycle spends its time, and what the engine adds over bare target forwards.

For batch 1 and 16: run the engine (method from the draft checkpoint) on held-out prompts, print
the share of each stage (target verify, draft backbone, candidates, head, walk, other), then time
bare target forwards of the same shapes (prefill + one (n+1)-token forward per cycle, no drafting,
no verification) and print the engine's overhead relative to them. "bookkeeping" is everything but
the target forward, the drafter forward and the head (stages ``walk`` + ``other``: proposal walk,
verification, cache truncation, commits); the methods-registry issue asks for ≤ 10 % of a cycle.
Last, the engine's target-verify stage per cycle against a bare transformers forward of the same
shape (its own cache, no mask, no taps): the speed issue asks for ≤ 1.10×.

    python benchmarks/engine_overhead.py --target models/tiny-s --draft models/tiny-s-lilicorr
    python benchmarks/engine_overhead.py --target models/smollm2-135m-instruct --draft models/smollm2-lilicorr \
        --prompt-len 128 --max-tokens 32 --batches 1 8
"""

from __future__ import annotations

import argparse
import time

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.decoding.stats import STAGES, StageTimer
from lilicorr.runtime.cache import pad_right
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def prompts_for(target: TargetRuntime, n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, target.vocab_size, (length,), generator=g).tolist() for _ in range(n)]


def run(target, draft, batch, n_spec, max_tokens, prompts):
    engine = build_engine(target, SpecConfig(num_speculative_tokens=n_spec), draft)
    reqs = [Request(p, SamplingParams(max_tokens=max_tokens, ignore_eos=True)) for p in prompts[:batch]]
    t0 = time.perf_counter()
    engine.add(reqs)
    engine.timer = StageTimer()  # the stages of the draft–verify cycles only, not the prefill
    cycles = 0
    while engine.seqs:
        engine.step()
        cycles += 1
    total = time.perf_counter() - t0
    return engine, cycles, total


@torch.no_grad()
def bare_transformers(target, prompts, batch, cycles, width):
    """The same shapes through transformers alone: its own cache, no attention mask, no taps; seconds of
    the ``cycles`` verify-shaped forwards only (the prefill is not counted). Rows are padded on the left
    to one length, which a bare model call cannot mask; only the time matters here."""
    from transformers import DynamicCache

    n = max(len(p) for p in prompts[:batch])
    ids = torch.tensor([[5] * (n - len(p)) + p for p in prompts[:batch]])
    cache = DynamicCache(config=target.model.config)
    target.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    spent = 0.0
    for _ in range(cycles):
        t0 = time.perf_counter()
        out = target.model(input_ids=torch.full((batch, width), 5), past_key_values=cache, use_cache=True)
        out.logits.float()  # the engine reads fp32 logits too
        spent += time.perf_counter() - t0
        cache.crop(-(width - 1))  # keep one token per cycle
    return spent


@torch.no_grad()
def bare_target(target, prompts, batch, cycles, width):
    """Prefill + ``cycles`` forwards of ``width`` tokens per row, with taps, no other work."""
    state = target.new_state(batch)
    ids, mask = pad_right(prompts[:batch])
    t0 = time.perf_counter()
    target.forward(state, ids, mask)
    for _ in range(cycles):
        target.forward(state, torch.full((batch, width), 5))
        target.truncate(state, state.lengths - width + 1)  # keep one token per cycle, like a rejection
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/tiny-s")
    ap.add_argument("--draft", default="models/tiny-s-lilicorr")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto", help="auto: bf16 with AMX-bf16, else fp32 (as generate)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(args.target, dtype=dtype)
    draft = load_draft(args.draft, target.model.config, dtype=dtype)
    n_spec = draft.cfg.block_size - 1
    prompts = prompts_for(target, max(args.batches), args.prompt_len, seed=0)
    print(
        f"target {args.target}, draft {args.draft} ({draft.cfg.architecture}), n={n_spec}, "
        f"threads {args.threads}, {dtype}"
    )
    for batch in args.batches:
        run(target, draft, batch, n_spec, 8, prompts)  # warm-up
        engine, cycles, total = run(target, draft, batch, n_spec, args.max_tokens, prompts)
        t = engine.timer.as_dict()
        cycle = sum(t.values())
        shares = "  ".join(f"{s} {100 * t[s] / cycle:5.1f}%" for s in STAGES)
        bare = bare_target(target, prompts, batch, cycles, n_spec + 1)
        hf = bare_transformers(target, prompts, batch, cycles, n_spec + 1)
        print(f"batch {batch}: {cycles} cycles, tau {engine.stats.tau:.2f}, {1000 * cycle / cycles:.1f} ms/cycle")
        print(f"  shares: {shares}")
        print(f"  bookkeeping (walk + other): {100 * (t['walk'] + t['other']) / cycle:.1f} % of the cycle")
        print(
            f"  bare target forwards of the same shapes: {bare:.3f}s; engine total {total:.3f}s; "
            f"overhead ×{total / bare:.2f} (drafting + head + verification + bookkeeping)"
        )
        per_verify = t["target_verify"] / cycles
        print(
            f"  target verify stage {1000 * per_verify:.1f} ms per forward vs a bare transformers forward of "
            f"{n_spec + 1} tokens per row {1000 * hf / cycles:.1f} ms: ×{per_verify / (hf / cycles):.2f} "
            "(the engine's adds the hole-tolerant mask, RoPE positions, taps and the cache bookkeeping)"
        )


if __name__ == "__main__":
    main()
