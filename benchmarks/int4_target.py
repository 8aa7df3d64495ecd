"""The target's 4-bit projections (``runtime/int4_linear.py``) against its packed bf16 layers: speed and accuracy.

Why: the int4 kernel is on by default for a bf16 target whose folder was dequantized from a 4-bit GGUF; this says
what it buys and costs on this machine. Speed: whole target forwards of ``TargetRuntime`` after a 120-token prompt,
at 1 row (a plain step) and at verify widths, with the int4 kernel at every row count (``LILICORR_INT4_MAX_ROWS``
large), at none (``LILICORR_INT4=0``: the packed bf16 layers) and with the default cut-over; the runtimes take
turns each round. Accuracy (``--accuracy``): the bf16 target with and without the int4 kernel against the fp32
target over the positions of ShareGPT prompts (top-1 agreement, KL), every row count on the int4 kernel.

    python benchmarks/int4_target.py --rounds 3
    OMP_WAIT_POLICY=PASSIVE python benchmarks/int4_target.py --rounds 3 --serve   # as `lilicorr serve` runs it
    python benchmarks/int4_target.py --accuracy
    python benchmarks/int4_target.py --fp32-layer
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

import sys

from lilicorr.cli.openmp import openmp_spin

# the OpenMP wait `lilicorr bench` chooses (a bounded spin on an idle machine), before torch loads: the figures
# this prints are those of the engine as bench and generate run it; with --serve, the server's (no spin: passes of
# up to 2 rows and 36 tokens then run on one thread, runtime/threads.py)
openmp_spin("serve" if "--serve" in sys.argv else "bench")

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from packed_linear import per_call_us

from lilicorr.runtime import int4_linear
from lilicorr.runtime.runtime import TargetRuntime


def load(target: str, dtype: torch.dtype, int4: bool, rows: int | None = None) -> TargetRuntime:
    os.environ[int4_linear.ENV] = "1" if int4 else "0"
    os.environ[int4_linear.ROWS_ENV] = "" if rows is None else str(rows)
    try:
        return TargetRuntime.load(target, dtype=dtype)
    finally:
        os.environ.pop(int4_linear.ENV)
        os.environ.pop(int4_linear.ROWS_ENV)


def step_ms(rt: TargetRuntime, prompt: torch.Tensor, rows: int, reps: int) -> float:
    """Median ms of a forward of ``rows`` new tokens after ``prompt`` (the cache truncated back each time)."""
    state = rt.new_state(1)
    with torch.inference_mode():
        rt.forward(state, prompt, want_taps=False, logits_at=torch.tensor([prompt.shape[1] - 1]))
        keep = state.lengths.clone()
        x = torch.randint(0, rt.vocab_size, (1, rows))
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            rt.forward(state, x, want_taps=False)
            times.append(time.perf_counter() - t0)
            rt.truncate(state, keep)
    return 1e3 * statistics.median(times)


def speed(args: argparse.Namespace) -> None:
    runtimes = {
        "packed bf16": load(args.target, torch.bfloat16, False),
        "int4 always": load(args.target, torch.bfloat16, True, rows=10**9),
        f"default (int4 up to {int4_linear.MAX_ROWS} rows)": load(args.target, torch.bfloat16, True),
    }
    print(f"int4 projections: {runtimes['int4 always'].int4_layers}")
    prompt = torch.randint(0, runtimes["packed bf16"].vocab_size, (1, 120), generator=torch.Generator().manual_seed(0))
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for rows in args.rows:
            for name, rt in runtimes.items():
                times.setdefault((name, rows), []).append(step_ms(rt, prompt, rows, args.reps))
    for rows in args.rows:
        base = statistics.median(times[("packed bf16", rows)])
        cells = [f"packed bf16 {base:.2f} ms"]
        for name in list(runtimes)[1:]:
            ms = statistics.median(times[(name, rows)])
            cells.append(f"{name} {ms:.2f} ms ({base / ms:.2f}x)")
        print(f"{rows:>2} rows: " + ", ".join(cells))


def accuracy(args: argparse.Namespace) -> None:
    ref = load(args.target, torch.float32, False)
    arms = {
        "bf16 packed": load(args.target, torch.bfloat16, False),
        "bf16 int4": load(args.target, torch.bfloat16, True, 10**9),
    }
    with open(args.prompts) as f:
        prompts = [json.loads(line)["messages"][0]["content"] for line in f][: args.prompts_n]
    sums = {name: [0, 0, 0.0] for name in arms}  # agreeing top-1, positions, Σ KL
    with torch.inference_mode():
        for text in prompts:
            ids = torch.tensor([ref.tokenizer(text)["input_ids"][:256]])  # [1, n]
            want = ref.forward(ref.new_state(1), ids, want_taps=False).logits[0].float()  # [n, V]
            for name, rt in arms.items():
                got = rt.forward(rt.new_state(1), ids, want_taps=False).logits[0].float()  # [n, V]
                s = sums[name]
                s[0] += int((got.argmax(-1) == want.argmax(-1)).sum())
                s[1] += want.shape[0]
                s[2] += float(F.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="sum"))
    for name, (agree, n, kl) in sums.items():
        print(f"{name} against fp32: top-1 {agree}/{n} ({agree / n:.4f}), KL(fp32 || {name}) {kl / n:.2e} a position")


def fp32_layer() -> None:
    """Why the kernel is left to bf16: one SmolLM2-sized layer (576 → 1 536) on it with fp32 inputs and scales
    against ``F.linear`` in fp32, 1 and 9 rows."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (1536, 576), generator=gen, dtype=torch.int32)
    d, m = torch.rand(1536, 18, generator=gen) * 0.01 + 1e-3, -torch.rand(1536, 18, generator=gen) * 0.05
    w = (q.view(1536, 18, 32) * d[..., None] + m[..., None]).view(1536, 576)
    packed, scales = int4_linear.pack_grid(q, d, m, torch.float32)
    for rows in (1, 9):
        x = torch.randn(rows, 576, generator=gen)
        plain = min(per_call_us(lambda x=x: F.linear(x, w), reps=100) for _ in range(3))
        int4 = min(
            per_call_us(lambda x=x: int4_linear.int4_matmul(x, packed, scales, 1536), reps=100) for _ in range(3)
        )
        print(f"fp32, {rows} rows: F.linear {plain:.0f} µs, int4 kernel {int4:.0f} µs ({plain / int4:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 5, 9, 13, 17, 33])
    ap.add_argument("--serve", action="store_true", help="the server's OpenMP wait (no spin) instead of bench's")
    ap.add_argument("--accuracy", action="store_true", help="accuracy against the fp32 target instead of speed")
    ap.add_argument("--fp32-layer", action="store_true", help="one layer on the kernel in fp32 against F.linear")
    ap.add_argument("--prompts", default="data/prompts/sharegpt.jsonl")
    ap.add_argument("--prompts-n", type=int, default=24)
    args = ap.parse_args()
    if args.fp32_layer:
        fp32_layer()
    elif args.accuracy:
        accuracy(args)
    else:
        speed(args)


if __name__ == "__main__":
    main()
