"""Step by step, what the draft gate of a default configuration decides and what each kind of step costs.

Why: the gate (``decoding/adaptive.py``, ``DraftGate``) pauses drafting while drafting steps deliver fewer tokens
per second than plain ones; when a default stops paying, this says whether the gate is wrong or drafting is. Each
prompt prints its steps as ``D<tokens>:<ms>`` (drafting) or ``p<tokens>:<ms>`` (plain) and the gate's running
rates after it; the totals give ms a step and tokens/s of each kind.

    python benchmarks/gate_steps.py --draft models/smollm2-dflash --prompts 12
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

from lilicorr.cli.openmp import openmp_spin

# the OpenMP wait `lilicorr bench` chooses (a bounded spin on an idle machine), before torch loads: the figures
# this prints are those of the engine as bench and generate run it
openmp_spin("bench")

import argparse
import json
import time

from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-dflash")
    ap.add_argument("--method", default="default")
    ap.add_argument("--file", default="data/prompts/eval-mt-bench-humaneval.jsonl")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--tree-budget", type=int, help="tree nodes (default: the configuration's own)")
    args = ap.parse_args()
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(args.target, dtype=dtype)
    with open(args.file) as f:
        rows = [json.loads(line) for line in f][: args.prompts]
    config = {"model": args.draft, "method": args.method}
    if args.tree_budget:
        config["tree_budget"] = args.tree_budget
    engine = engine_from_speculative_config(target, config, dtype)
    gate = engine.gate
    if gate is None:
        raise SystemExit(f"{args.draft} with method {args.method!r} runs no draft gate")
    totals = {True: [0, 0.0, 0], False: [0, 0.0, 0]}  # steps, seconds, tokens
    for i, row in enumerate(rows):
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=i)
        engine.add([Request(row_ids(target.tokenizer, row), params)])
        steps = []
        while engine.seqs:
            drafts = gate.skip == 0  # what should_draft will answer this step
            t0 = time.perf_counter()
            emitted = engine.step()
            seconds = time.perf_counter() - t0
            tokens = sum(len(new) for _, new in emitted)
            t = totals[drafts]
            t[0], t[1], t[2] = t[0] + 1, t[1] + seconds, t[2] + tokens
            steps.append(f"{'D' if drafts else 'p'}{tokens}:{1e3 * seconds:.0f}")
        rates = f"drafting {gate.rate(True) or 0:.1f}, plain {gate.rate(False) or 0:.1f} tokens/s"
        print(f"{i:>2} {' '.join(steps)} | gate: {rates}, pause {gate.backoff}")
    for drafting, (n, seconds, tokens) in totals.items():
        if n:
            kind = "drafting" if drafting else "plain"
            print(f"{kind}: {n} steps, {1e3 * seconds / n:.1f} ms a step, {tokens / seconds:.1f} tokens/s")


if __name__ == "__main__":
    main()
