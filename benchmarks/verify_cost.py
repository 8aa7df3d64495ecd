"""The engine's target forward against transformers alone, same shapes, timed side by side.

The engine verifies through ``TargetRuntime``: a hole-tolerant cache with an explicit mask, RoPE
positions, hidden-state taps, and for trees an ancestor mask. The speed issue asks that this cost at
most 10 % more than a bare transformers forward (its own ``DynamicCache``, no mask, no taps) of the same
number of tokens. Each width is timed for every variant in turn (median of ``--repeats``), so a drifting
machine moves all columns together.

    python benchmarks/verify_cost.py --target models/smollm2-135m-instruct --widths 1 8 16 32
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import DynamicCache

from lilicorr.decoding.proposal import Proposal
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * sorted(times)[len(times) // 2]


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 8, 16, 32])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 8, 14, 20, 27], help="tapped layers (the drafters')")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = TargetRuntime.load(args.target, layer_ids=tuple(args.layers), dtype=resolve_dtype(args.dtype))
    model, g = target.model, torch.Generator().manual_seed(0)
    context = torch.randint(5, 1000, (1, args.context), generator=g)
    cache = DynamicCache(config=model.config)
    model(input_ids=context, past_key_values=cache, use_cache=True, logits_to_keep=1)
    state = target.new_state(1)
    target.forward(state, context, want_taps=False)
    print(f"{args.target}, {args.context} cached tokens, {target.model.dtype}, {args.threads} threads; median ms")
    print(
        "| tokens | transformers alone | engine chain verify (taps) | engine tree verify (taps) "
        "| chain / bare | tree / bare |"
    )
    print("|---|---|---|---|---|---|")
    for n in args.widths:
        ids = torch.randint(5, 1000, (1, n), generator=g)

        def bare(ids=ids, n=n):
            model(input_ids=ids, past_key_values=cache, use_cache=True).logits.float()
            cache.crop(-n)

        def chain(ids=ids, n=n):
            target.forward(state, ids, want_taps=True)
            target.truncate(state, state.lengths - n)

        parents = torch.tensor([[j // 2 for j in range(n - 1)]], dtype=torch.long)  # a binary tree
        tree = Proposal(tokens=ids[:, 1:], parents=parents)

        def tree_verify(ids=ids, tree=tree, n=n):
            target.forward_tree(state, ids, tree.depth(), tree.ancestors(), want_taps=True)
            keep = torch.zeros(1, n, dtype=torch.bool)
            keep[0, 0] = True
            target.keep_new(state, keep)
            target.truncate(state, state.lengths - 1)

        b, c, t = (median_ms(f, args.repeats) for f in (bare, chain, tree_verify))
        print(f"| {n} | {b:.1f} | {c:.1f} | {t:.1f} | {c / b:.2f} | {t / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
