"""Pre-packed linear layers (``runtime/packed_linear.py``) against ``F.linear``: one layer, then whole engines.

Why: the packing is on by default for every CPU target and drafter; this says what it buys on this machine. First
one SmolLM2-sized layer (576 → 1 536) at 1, 16, 256 and 1 024 rows (a step, a verify, prefills), fp32 and bf16, 48
distinct weights in turn so they come from memory as a model's do (``--layer-only``: nothing else); then the engine
as ``lilicorr serve`` runs it (the load policy), plain and with the default speculative configuration, with and
without packing (``LILICORR_PACKED_LINEAR=0`` at load), on the same ShareGPT requests at ``--max-batch`` concurrent
rows; the four engines take turns each round, so a drift on the machine does not favour one.

    python benchmarks/packed_linear.py --rounds 3 --max-batch 1 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from policy_outcomes import drive, prompt_ids

from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.runtime import packed_linear
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def per_call_us(fn, reps: int = 400) -> float:
    for _ in range(10):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return 1e6 * (time.perf_counter() - t0) / reps


def layer_us(x: torch.Tensor, weights: list[torch.Tensor], packed: list[torch.Tensor] | None) -> float:
    """µs a call, the weights taken in turn (48 of them: from memory, as a model's are)."""
    turn = iter(range(10**9))
    if packed is None:
        return per_call_us(lambda: F.linear(x, weights[next(turn) % len(weights)]))
    return per_call_us(lambda: packed_linear.packed_matmul(x, packed[next(turn) % len(packed)], None, 1536))


def one_layer() -> None:
    for dtype in packed_linear.DTYPES:
        weights = [torch.randn(1536, 576).to(dtype) for _ in range(48)]
        packed = [packed_linear.pack_weight(w) for w in weights]
        for rows in (1, 16, 256, 1024):  # a decoding step, a verify pass, prefills
            x = torch.randn(rows, 576).to(dtype)
            plain, fast = layer_us(x, weights, None), layer_us(x, weights, packed)
            name = str(dtype).removeprefix("torch.")
            print(f"{name} {rows:>2} rows: F.linear {plain:.0f} µs, packed {fast:.0f} µs ({plain / fast:.2f}x)")


def engines(target_dir: str, draft: str, method: str, dtype: torch.dtype) -> dict[str, object]:
    out = {}
    for packed in (True, False):
        os.environ[packed_linear.ENV] = "1" if packed else "0"
        target = TargetRuntime.load(target_dir, dtype=dtype)
        tag = "packed" if packed else "F.linear"
        out[f"plain, {tag}"] = engine_from_speculative_config(target, None, dtype)
        spec = engine_from_speculative_config(target, {"model": draft, "method": method}, dtype)
        spec.use_load_policy()
        out[f"{method}, {tag}"] = spec
    os.environ.pop(packed_linear.ENV)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr-conv")
    ap.add_argument("--method", default="default")
    ap.add_argument("--prompts", default="data/prompts/sharegpt.jsonl")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--max-batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7, 1.0])
    ap.add_argument("--layer-only", action="store_true", help="only the one-layer timings")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    one_layer()
    if args.layer_only:
        return
    dtype = resolve_dtype(args.dtype)
    ways = engines(args.target, args.draft, args.method, dtype)
    target = next(iter(ways.values())).target
    temps = tuple(args.temperatures)
    for mb in args.max_batch:
        served = prompt_ids(target, args.prompts, 208, max(args.requests, 2 * mb))
        for eng in ways.values():  # warm-up: kernels, the policy's cost curve
            drive(eng, prompt_ids(target, args.prompts, 200, 4), mb, None, temperatures=temps)
        rates: dict[str, list[float]] = {name: [] for name in ways}
        names = list(ways)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                tokens = drive(ways[name], served, mb, None, temperatures=temps)
                rates[name].append(tokens / (time.perf_counter() - t0))
        print(f"{dtype}, batch ≤ {mb}, {len(served)} requests at T {temps}, {args.rounds} rounds (tokens/s, median):")
        med = {name: statistics.median(v) for name, v in rates.items()}
        for name, v in rates.items():
            print(f"  {name:<24} {med[name]:7.1f}  ({', '.join(f'{x:.1f}' for x in v)})")
        for kind in ("plain", args.method):
            print(f"  {kind}: packed / F.linear {med[f'{kind}, packed'] / med[f'{kind}, F.linear']:.2f}x")
        print(f"  {args.method} / plain: packed {med[f'{args.method}, packed'] / med['plain, packed']:.2f}x, "
              f"F.linear {med[f'{args.method}, F.linear'] / med['plain, F.linear']:.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
