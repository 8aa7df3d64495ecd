"""One thread against the configured threads for target passes of each shape, with OpenMP's threads asleep between
operators (``runtime/threads.py``: the rule this measures, and what it was measured at).

Why: ``lilicorr serve`` runs with ``OMP_WAIT_POLICY=PASSIVE`` and no spin unless asked, where waking torch's second
thread for each of a small pass's operators costs more than it returns. Run it under that setting (the script sets
it before torch loads unless ``GOMP_SPINCOUNT`` is given) with nothing else running; ``--spin N`` times with
``GOMP_SPINCOUNT=N`` instead. Rule off here (``LILICORR_STEP_THREADS=0``): each cell sets its thread count itself.

    python benchmarks/step_threads.py
    python benchmarks/step_threads.py --spin 10000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

SHAPES = ((1, 1), (2, 1), (4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (1, 9), (2, 9), (4, 9), (1, 17), (2, 17), (1, 33),
          (1, 96), (1, 256))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--context", type=int, default=100)
    ap.add_argument("--spin", type=int, help="GOMP_SPINCOUNT to time with (default: 0, threads asleep)")
    args = ap.parse_args()
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = str(args.spin or 0)
    os.environ["LILICORR_STEP_THREADS"] = "0"
    import torch  # after the environment: libgomp reads it when torch loads

    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.runtime.threads import one_thread_for

    target = TargetRuntime.load(args.target, dtype=torch.bfloat16)
    states = {}
    times: dict[tuple[int, int, int], list[float]] = {}
    with torch.inference_mode():
        for b in sorted({b for b, _ in SHAPES}):
            state = target.new_state(b)
            ids = torch.randint(0, 1000, (b, args.context))
            target.forward(state, ids, want_taps=False, logits_at=torch.tensor([args.context - 1]))
            states[b] = (state, state.lengths.clone())
        for _ in range(args.rounds):
            for threads in (1, args.threads):
                torch.set_num_threads(threads)
                for b, n in SHAPES:
                    state, keep = states[b]
                    t0 = time.perf_counter()
                    target.forward(state, torch.randint(0, 1000, (b, n)), want_taps=False)
                    times.setdefault((b, n, threads), []).append(time.perf_counter() - t0)
                    target.truncate(state, keep)
    os.environ.pop("LILICORR_STEP_THREADS")
    torch.set_num_threads(args.threads)
    print(f"GOMP_SPINCOUNT={args.spin or 0}, {args.threads} threads configured; median ms of {args.rounds} passes")
    print("| rows × tokens | 1 thread | configured | configured / 1 thread | the rule picks |")
    print("|---|---:|---:|---:|---|")
    for b, n in SHAPES:
        one, many = (1e3 * statistics.median(times[(b, n, t)]) for t in (1, args.threads))
        pick = "1 thread" if one_thread_for(b, n) else "configured"
        print(f"| {b} × {n} | {one:.1f} | {many:.1f} | {many / one:.2f} | {pick} |")


if __name__ == "__main__":
    main()
