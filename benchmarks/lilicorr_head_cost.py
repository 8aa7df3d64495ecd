"""Cost of the shipped LiLiCorr head's forward on a lattice (7 slots × K candidates, batch 1 / 8 / 32), bf16 and
fp32, on 1 and 2 threads, and the operators it spends it on (torch.profiler, --profile). The speed pages'
breakdown put the head at ≈ 5 ms of a ≈ 115 ms drafting cycle in bf16 on a 2-core CPU (≈ 3 % published on a
GPU): its ≈ 100 tiny operators pay OpenMP's wake-up on every parallel region under OMP_WAIT_POLICY=PASSIVE (on an
idle machine: 1.8 ms on one thread against 4.4 ms on two), the cost that the decoding commands' bounded spin
(GOMP_SPINCOUNT, docs/results/openmp-spin.md) removes for every operator. Run it alone: background load changes
the answer.

    python benchmarks/lilicorr_head_cost.py [--draft models/smollm2-lilicorr] [--iters 200]
"""

from __future__ import annotations

import argparse
import time

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.runtime.machine import bf16_label
from lilicorr.shipped import SHIPPED_DRAFT


def lattice_inputs(head, hm: int, n: int, dtype: torch.dtype, batch: int = 1) -> tuple[torch.Tensor, ...]:
    """Random inputs of the head's shapes: pass_hidden [b, n, Hm], token_emb [b, n, K, Hm], lp [b, n, K]
    (sorted descending, as the lattice gives them), anchor [b, Hm], anchor_valid [b]."""
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(batch, n, head.k, generator=g).sort(-1, descending=True).values.log_softmax(-1)
    return (
        torch.randn(batch, n, hm, generator=g).to(dtype),
        torch.randn(batch, n, head.k, hm, generator=g).to(dtype),
        lp,
        torch.randn(batch, hm, generator=g).to(dtype),
        torch.ones(batch, dtype=torch.bool),
    )


def time_head(head, inputs, iters: int) -> float:
    """Mean milliseconds per forward under inference mode, after a warm-up."""
    with torch.inference_mode():
        for _ in range(10):
            head(*inputs)
        t0 = time.perf_counter()
        for _ in range(iters):
            head(*inputs)
    return (time.perf_counter() - t0) / iters * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", default=SHIPPED_DRAFT)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--profile", action="store_true", help="print the operator table of each dtype")
    args = ap.parse_args()
    print(bf16_label())
    for dtype in (torch.bfloat16, torch.float32):
        draft = load_draft(args.draft, dtype=dtype).eval()
        head = draft.lilicorr
        for batch in args.batches:
            inputs = lattice_inputs(head, draft.cfg.hidden_size, draft.cfg.block_size - 1, dtype, batch)
            ms = {}
            for threads in (1, 2):
                torch.set_num_threads(threads)
                ms[threads] = time_head(head, inputs, args.iters)
            print(f"{dtype} batch {batch}: {ms[1]:.2f} ms on 1 thread, {ms[2]:.2f} ms on 2 ({ms[2] / ms[1]:.2f}×)")
        if args.profile:
            inputs = lattice_inputs(head, draft.cfg.hidden_size, draft.cfg.block_size - 1, dtype)
            with torch.inference_mode(), torch.profiler.profile() as prof:
                for _ in range(20):
                    head(*inputs)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
