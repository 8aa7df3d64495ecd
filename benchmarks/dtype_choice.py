"""Which engine dtype to run on this CPU: plain decoding and the shipped default, fp32 and bf16, paired per prompt.

Why: `--dtype auto` picks bf16 where the CPU multiplies bf16 natively, and whether that pays differs between
plain decoding (one token a step: memory- and overhead-bound) and speculative decoding (a 16-node tree a step:
the multi-token matmuls that bf16 kernels speed up). Absolute speeds on a shared 2-core machine drift by tens
of percent over minutes, so each prompt runs every arm back to back — AR fp32, AR bf16, the default in bf16,
the default in fp32 — and the table reports each arm's tokens/s and its ratio to AR fp32 over the same prompts.
The default is `generate --draft DIR`'s (lilicorr.decoding.config.FASTEST), one engine per arm kept across
prompts (its draft gate keeps what it measured), as `bench` does.

Usage: python benchmarks/dtype_choice.py --target models/smollm2-135m-instruct --draft models/smollm2-lilicorr \
    --prompts data/prompts/eval-mt-bench-humaneval.jsonl --num-prompts 36 --max-new-tokens 32 --out runs/dtype.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lilicorr.bench.runner import environment
from lilicorr.checkpoint import load_draft
from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.chat import row_ids
from lilicorr.data.prompt_sets import read_prompt_rows, round_robin
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import default_config, parse_speculative_config
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL prompts (as bench reads them)")
    ap.add_argument("--num-prompts", type=int, default=36)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prompts = round_robin(read_prompt_rows(Path(args.prompts)), args.num_prompts)  # bench's choice of prompts
    spec = parse_speculative_config(default_config(args.draft))
    engines = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        target = TargetRuntime.load(args.target, dtype=dtype)
        draft = load_draft(args.draft, target.model.config, dtype=dtype)
        engines[f"ar {name}"] = (target, build_engine(target))
        engines[f"default {name}"] = (target, build_engine(target, spec, draft, args.draft))
    order = ["ar fp32", "ar bf16", "default bf16", "default fp32"]
    seconds = dict.fromkeys(order, 0.0)
    tokens = dict.fromkeys(order, 0)
    for i, p in enumerate(prompts):
        for arm in order:
            target, engine = engines[arm]
            params = SamplingParams(max_tokens=args.max_new_tokens, temperature=0.0, seed=i, ignore_eos=True)
            req = Request(row_ids(target.tokenizer, p), params, id=str(p["id"]), eos_ids=frozenset())
            t0 = time.perf_counter()
            engine.generate([req])
            seconds[arm] += time.perf_counter() - t0
            tokens[arm] += len(req.output_ids)
        print(f"prompt {i + 1}/{len(prompts)}", flush=True)
    base = tokens["ar fp32"] / seconds["ar fp32"]
    result = {
        "environment": environment(),
        "draft": args.draft,
        "config": default_config(args.draft),
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "arms": {
            arm: {
                "tokens_per_s": round(tokens[arm] / seconds[arm], 3),
                "vs_ar_fp32": round(tokens[arm] / seconds[arm] / base, 4),
                **(
                    {"tau": round(engines[arm][1].stats.tau, 3), "paused_steps": engines[arm][1].stats.num_paused_steps}
                    if arm.startswith("default")
                    else {}
                ),
            }
            for arm in order
        },
    }
    atomic_write_text(Path(args.out), json.dumps(result, indent=2) + "\n")
    print("| arm | tokens/s | × AR fp32 |\n|---|---|---|")
    for arm in order:
        r = result["arms"][arm]
        print(f"| {arm} | {r['tokens_per_s']:.2f} | {r['vs_ar_fp32']:.3f}× |")


if __name__ == "__main__":
    main()
