"""Where a drafting step's time goes at one request: a tree drafted on every step against plain steps.

Why: whether drafting can pay on a machine is the ratio of a drafting step to a plain step against τ; this times the
default's tree (16 nodes with the prompt-lookup graft, no gate) on every step and prints ms a step and the engine's
stages per step (prefill included) beside plain decoding of the same prompts. ``LILICORR_OMP_SPIN=0`` gives the
server's wait, the default bench's choice (a bounded spin on an idle machine).

    OMP_WAIT_POLICY=PASSIVE LILICORR_OMP_SPIN=0 python benchmarks/drafting_step_parts.py
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

from lilicorr.cli.openmp import openmp_spin

openmp_spin("bench")

import argparse
import json
import time

from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.config import LOOKUP_ON
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr-conv")
    ap.add_argument("--method", default="lilicorr-tree", help="lilicorr-tree or ddtree")
    ap.add_argument("--tree-budget", type=int, default=16)
    ap.add_argument("--file", default="data/prompts/eval-mt-bench-humaneval.jsonl")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    dtype = resolve_dtype("auto")
    target = TargetRuntime.load(args.target, dtype=dtype)
    with open(args.file) as f:
        rows = [json.loads(line) for line in f][: args.prompts]
    spec = {"model": args.draft, "method": args.method, "tree_budget": args.tree_budget, **LOOKUP_ON}
    for name, config in (("drafting", spec), ("plain", None)):
        engine = engine_from_speculative_config(target, config, dtype)
        engine.generate([Request(row_ids(target.tokenizer, rows[0]), SamplingParams(max_tokens=8, ignore_eos=True))])
        engine.timer.seconds.clear()  # the warm-up's stages are not counted
        steps, tokens, seconds = 0, 0, 0.0
        for row in rows:
            engine.add(
                [Request(row_ids(target.tokenizer, row), SamplingParams(max_tokens=args.max_tokens, ignore_eos=True))]
            )
            while engine.seqs:
                t0 = time.perf_counter()
                emitted = engine.step()
                seconds += time.perf_counter() - t0
                steps += 1
                tokens += sum(len(new) for _, new in emitted)
        stages = {k: round(1e3 * v / steps, 2) for k, v in engine.timer.as_dict().items()}
        print(f"{name}: {steps} steps, {1e3 * seconds / steps:.1f} ms a step, {tokens / steps:.2f} tokens a step")
        print(f"  ms a step by stage (prefill included): {stages}")


if __name__ == "__main__":
    main()
