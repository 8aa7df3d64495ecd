"""Continuous batching in one process, without HTTP: plain decoding against a drafter under the load policy.

Why: ``lilicorr bench serve`` measures whole servers one after another, and this VM's speed drifts by a quarter
within minutes (session 47: the same plain server at 16 in flight served 67.6, 100.2 and 99.1 tokens/s in three
rounds), so a 5-10 % effect hides in its rounds. Here both engines run the same workload (requests join as rows
finish, at most ``--concurrency`` running, temperatures 0 / 0.7 / 1 in turn, lengths spread) *interleaved
iteration by iteration*: plain takes one iteration (a prefill of the joining requests, or one step), then the
speculative engine one, the order swapped every iteration, so a drift reaches both alike. Each arm's rate is its
tokens over the seconds its own iterations took. The OpenMP wait is the server's (no spin).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/engine_under_load.py --concurrency 1 4 16 32 --requests 32 --runs 2

``--step-times`` adds where the seconds went: each arm's undrafted steps (median by batch size), the speculative
engine's drafting steps (median seconds and tokens a row), the prefill a joining row.
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "0")

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field

import torch

from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime

TEMPERATURES = (0.0, 0.7, 1.0)


@dataclass
class Arm:
    """One engine's run over the workload: its queue and where its seconds went."""

    engine: SpecEngine
    waiting: list[Request]
    concurrency: int
    requests: list[Request] = field(default_factory=list)
    seconds: float = 0.0
    undrafted: dict[int, list[float]] = field(default_factory=dict)  # batch size -> seconds of a step no row drafted
    drafting: list[tuple[float, float]] = field(default_factory=list)  # (seconds, tokens a row) of drafting steps
    prefill: list[float] = field(default_factory=list)  # seconds of an add(), per joining row
    prefill_stages: dict[str, float] = field(default_factory=dict)  # the engine's stage seconds inside add(), summed

    def __post_init__(self) -> None:
        self.requests = list(self.waiting)

    @property
    def done(self) -> bool:
        return not self.waiting and not self.engine.seqs

    def iterate(self) -> None:
        """What the server's loop does next: admit while there is room, else step every running row."""
        engine, free = self.engine, self.concurrency - len(self.engine.seqs)
        if self.waiting and free > 0:
            joining, self.waiting = self.waiting[:free], self.waiting[free:]
            before = engine.timer.as_dict()
            t = time.perf_counter()
            engine.add(joining)
            dt = time.perf_counter() - t
            self.prefill.append(dt / len(joining))
            spent = {k: v - before.get(k, 0.0) for k, v in engine.timer.as_dict().items()}
            spent["untimed"] = dt - sum(spent.values())
            for k, v in spent.items():
                self.prefill_stages[k] = self.prefill_stages.get(k, 0.0) + v
        else:
            batch, drafts = len(engine.seqs), engine.stats.num_drafts
            t = time.perf_counter()
            emitted = engine.step()
            dt = time.perf_counter() - t
            if engine.stats.num_drafts == drafts:
                self.undrafted.setdefault(batch, []).append(dt)
            else:
                tokens = sum(len(toks) for _, toks in emitted)
                self.drafting.append((dt, tokens / max(1, batch)))
        self.seconds += dt

    @property
    def steps(self) -> int:
        return len(self.drafting) + sum(map(len, self.undrafted.values()))

    @property
    def rate(self) -> float:
        return sum(len(r.output_ids) for r in self.requests) / self.seconds


def workload(tokenizer, rows: list[dict], n: int, max_tokens: int) -> list[Request]:
    """``n`` requests, prompts and temperatures in turn; their lengths spread over the 16 tokens below
    ``max_tokens``, as answers' lengths vary: rows that all end on the same step join back as one batch, which
    makes plain decoding's prefills cheaper a row than a speculative engine's, whose rows end apart."""
    return [
        Request(
            row_ids(tokenizer, rows[i % len(rows)]),
            SamplingParams(max_tokens=max_tokens - (7 * i) % 17, temperature=TEMPERATURES[i % 3], seed=i),
        )
        for i in range(n)
    ]


def interleaved(engines: dict[str, SpecEngine], make, concurrency: int) -> dict[str, Arm]:
    """Both engines over the same workload, one iteration each in turn, the order swapped every iteration."""
    arms = {name: Arm(e, make(), concurrency) for name, e in engines.items()}
    names, i = list(arms), 0
    while not all(a.done for a in arms.values()):
        for name in names if i % 2 == 0 else names[::-1]:
            if not arms[name].done:
                arms[name].iterate()
        i += 1
    return arms


def step_report(name: str, arm: Arm) -> str:
    """One arm's undrafted steps (median by batch, batches seen at least 5 times), drafting steps and prefill."""
    cells = [
        f"b={b} {statistics.median(v) * 1e3:.1f} ms ({len(v)})" for b, v in sorted(arm.undrafted.items()) if len(v) >= 5
    ]
    parts = ", ".join(f"{k} {v:.2f}" for k, v in arm.prefill_stages.items() if v >= 0.005)
    line = (
        f"  {name}: undrafted steps {', '.join(cells)}; prefill {statistics.median(arm.prefill) * 1e3:.1f} ms a row "
        f"({len(arm.prefill)} joins, {sum(arm.prefill_stages.values()):.2f} s: {parts})"
    )
    if arm.drafting:
        secs, toks = zip(*arm.drafting, strict=True)
        line += (
            f"; {len(arm.drafting)} drafting steps, median {statistics.median(secs) * 1e3:.1f} ms, "
            f"{statistics.mean(toks):.2f} tokens a row"
        )
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr-conv")
    ap.add_argument("--method", default="default")
    ap.add_argument("--file", default="data/prompts/eval-mt-bench-humaneval.jsonl")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32])
    ap.add_argument("--requests", type=int, default=64, help="requests a run (at least the concurrency)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--runs", type=int, default=2, help="interleaved runs at each concurrency")
    ap.add_argument("--step-times", action="store_true", help="also where each arm's seconds went")
    args = ap.parse_args()
    torch.set_num_threads(2)
    dtype = resolve_dtype("auto")
    target = TargetRuntime.load(args.target, dtype=dtype)
    with open(args.file) as f:
        rows = [json.loads(line) for line in f]
    spec = engine_from_speculative_config(target, {"model": args.draft, "method": args.method}, dtype)
    spec.use_load_policy()
    engines = {"plain": engine_from_speculative_config(target, None, dtype), "spec": spec}
    for c in args.concurrency:
        n = max(args.requests, c)
        ratios = []
        for run in range(args.runs):
            arms = interleaved(engines, lambda n=n: workload(target.tokenizer, rows, n, args.max_tokens), c)
            plain, sp = arms["plain"], arms["spec"]
            ratios.append(sp.rate / plain.rate)
            print(
                f"c={c} run {run}: plain {plain.rate:.1f}, spec {sp.rate:.1f} tokens/s of own engine time "
                f"({ratios[-1]:.3f}x); spec drafted on {len(sp.drafting)} of {sp.steps} steps",
                flush=True,
            )
            if args.step_times:
                for name, arm in arms.items():
                    print(step_report(name, arm), flush=True)
        print(f"c={c}: spec/plain {statistics.mean(ratios):.3f}x (runs {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
