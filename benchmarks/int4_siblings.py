"""Sibling projections on the int4 kernel: one product over q, k and v stacked (and over gate and up) against one
each, for SmolLM2's layer shapes; checks that both give the same bits.

Why: ``runtime/int4_linear.py`` computes projections that read the same input in one call (``Siblings``); this
says what that buys per layer under each OpenMP wait the engine runs with. Run it with nothing else running:

    OMP_WAIT_POLICY=PASSIVE python benchmarks/int4_siblings.py                        # the server's wait
    OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000 python benchmarks/int4_siblings.py   # bench's spin
"""

from __future__ import annotations

import argparse

import torch
from decode_attention import per_call_us  # median µs a call

from lilicorr.runtime.int4_linear import GROUP, int4_matmul, pack_grid

GROUPS = {"q, k, v": (576, 192, 192), "gate, up": (1536, 1536)}  # SmolLM2-135M: hidden 576, 3 K/V heads of 64


def random_grid(out: int, inp: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.randint(0, 16, (out, inp), generator=gen, dtype=torch.int32)
    d = (torch.rand(out, inp // GROUP, generator=gen) * 0.01 + 1e-3).to(torch.bfloat16).float()
    m = (-torch.rand(out, inp // GROUP, generator=gen) * 0.05).to(torch.bfloat16).float()
    return q, d, m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 12])
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, outs in GROUPS.items():
            grids = [random_grid(o, 576, gen) for o in outs]
            own = [pack_grid(*g, torch.bfloat16) for g in grids]
            stacked = pack_grid(*(torch.cat(parts) for parts in zip(*grids, strict=True)), torch.bfloat16)
            for rows in args.rows:
                x = torch.randn(rows, 576, generator=gen).to(torch.bfloat16)

                def each(x=x, own=own, outs=outs):
                    return [int4_matmul(x, w, s, o) for (w, s), o in zip(own, outs, strict=True)]

                def shared(x=x, stacked=stacked, outs=outs):
                    return int4_matmul(x, *stacked, sum(outs)).split(list(outs), -1)

                same = all(torch.equal(a, b) for a, b in zip(each(), shared(), strict=True))
                a, b = per_call_us(each, args.reps), per_call_us(shared, args.reps)
                print(f"{threads} thread(s), {name}, {rows:>2} rows: one each {a:6.1f} µs, shared {b:6.1f} µs "
                      f"({a / b:.2f}x); same bits: {same}")  # fmt: skip


if __name__ == "__main__":
    main()
