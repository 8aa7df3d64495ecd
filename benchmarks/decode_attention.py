"""One layer's attention for a decoding step: torch's bf16 flash kernel against ``attention.fp32_attention``.

Why: at 32 rows of a bf16 SmolLM2 plain step, attention was 63 % of the step (torch's CPU flash kernel, 4.7 ms a
layer for one query token a row over 200 columns), and 43 % of a one-row step over 600 cached tokens; its fp32 path
is several times faster than its bf16 one for a single query token. This times both on SmolLM2's head layout (9
query heads, 3 K/V heads, 64 dims, K/V as views of a buffer with spare columns, as the runtime's cache hands them)
at the batch sizes, query lengths and thread counts the server runs, and prints each one's largest error against
fp64 attention; ``one_token_in_fp32`` in ``runtime/attention.py`` rests on it.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/decode_attention.py               # bf16, one and two threads
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from lilicorr.runtime.attention import fp32_attention

SHAPES = (
    (1, 1, 120),
    (1, 1, 600),
    (1, 1, 2000),
    (2, 1, 150),
    (4, 1, 150),
    (8, 1, 200),
    (32, 1, 200),
    (16, 1, 1000),
    (1, 17, 200),
    (4, 9, 150),
)  # rows, query tokens a row, columns


def per_call_us(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for rows, q_len, cols in SHAPES:
            kb, vb = (torch.randn(rows, 3, cols + 64, 64, generator=gen).to(dtype) for _ in range(2))
            k, v = kb[:, :, :cols], vb[:, :, :cols]  # [rows, kv_heads, cols, 64]: views, as the cache's
            q = torch.randn(rows, 9, q_len, 64, generator=gen).to(dtype)
            mask = torch.rand(rows, 1, q_len, cols, generator=gen) > 0.2  # holes, as a batch's ragged cache
            mask[..., -1] = True
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, enable_gqa=True)

            def flash(q=q, k=k, v=v, mask=mask):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

            def ours(q=q, k=k, v=v, mask=mask):
                return fp32_attention(q, k, v, mask, None)

            err = [float((f().double() - ref).abs().max()) for f in (flash, ours)]
            a, b = per_call_us(flash, args.reps), per_call_us(ours, args.reps)
            shape = f"{threads} thread(s), {rows:>2} rows × {q_len:>2} queries, {cols:>4} columns"
            errors = f"max error vs fp64 {err[0]:.4f} / {err[1]:.4f}"
            print(f"{shape}: flash {a:7.0f} µs, fp32 {b:7.0f} µs ({a / b:.2f}x); {errors}")


if __name__ == "__main__":
    main()
