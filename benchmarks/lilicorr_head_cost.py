"""Cost of the shipped LiLiCorr head's forward on one lattice (batch 1, 7 slots × K candidates), bf16 and fp32,
and the operators it spends it on (torch.profiler). The speed pages' breakdown puts the head at ≈ 5 ms of a
≈ 115 ms drafting cycle in bf16 on a 2-core CPU (≈ 3 % published on a GPU): this says where that goes.

    python benchmarks/lilicorr_head_cost.py [--draft models/smollm2-lilicorr] [--iters 200]
"""

from __future__ import annotations

import argparse
import time

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.runtime.runtime import cpu_has_fast_bf16
from lilicorr.shipped import SHIPPED_DRAFT


def lattice_inputs(head, hm: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Random inputs of the head's shapes: pass_hidden [1, n, Hm], token_emb [1, n, K, Hm], lp [1, n, K]
    (sorted descending, as the lattice gives them), anchor [1, Hm], anchor_valid [1]."""
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(1, n, head.k, generator=g).sort(-1, descending=True).values.log_softmax(-1)
    return (
        torch.randn(1, n, hm, generator=g).to(dtype),
        torch.randn(1, n, head.k, hm, generator=g).to(dtype),
        lp,
        torch.randn(1, hm, generator=g).to(dtype),
        torch.ones(1, dtype=torch.bool),
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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="print the operator table of each dtype")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, AMX-bf16: {cpu_has_fast_bf16()}")
    for dtype in (torch.bfloat16, torch.float32):
        draft = load_draft(args.draft, dtype=dtype).eval()
        head = draft.lilicorr
        inputs = lattice_inputs(head, draft.cfg.hidden_size, draft.cfg.block_size - 1, dtype)
        print(f"{dtype}: {time_head(head, inputs, args.iters):.2f} ms per forward")
        if args.profile:
            with torch.inference_mode(), torch.profiler.profile() as prof:
                for _ in range(20):
                    head(*inputs)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
