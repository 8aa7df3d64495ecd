"""Cost curve of a target on this machine: cached forward of n new tokens, fp32 vs bf16.

Why: the right dtype and draft/verify width differ per CPU (AMX-bf16 Intel vs AMD without
AVX-512), and every speed decision (verify width, tree budget, training dtype) rests on T(n).
Usage: python benchmarks/target_cost.py --target models/smollm2-135m-instruct --threads 2
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    ap.add_argument("--train-batch", type=int, default=4, help="also time a full forward of B x 256 tokens")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also print the operator table of ten 1-token steps")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
        ctx = torch.randint(100, 10000, (1, args.context))
        row = {}
        with torch.no_grad():
            for n in args.widths:
                times = []
                for _ in range(args.repeats + 1):
                    cache = DynamicCache(config=model.config)
                    model(input_ids=ctx, past_key_values=cache, use_cache=True)
                    new = torch.randint(100, 10000, (1, n))
                    t0 = time.perf_counter()
                    model(input_ids=new, past_key_values=cache, use_cache=True)
                    times.append(time.perf_counter() - t0)
                row[f"n{n}_ms"] = round(1000 * sorted(times[1:])[len(times[1:]) // 2], 1)
            if args.profile:  # where a one-token step's time goes (operator count and self time)
                cache = DynamicCache(config=model.config)
                model(input_ids=ctx, past_key_values=cache, use_cache=True)
                with torch.profiler.profile() as prof:
                    for _ in range(10):
                        model(input_ids=torch.tensor([[500]]), past_key_values=cache, use_cache=True)
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10), flush=True)
            toks = torch.randint(100, 10000, (args.train_batch, 256))
            t0 = time.perf_counter()
            for _ in range(2):
                model(input_ids=toks, output_hidden_states=True)
            row[f"full_{args.train_batch}x256_s"] = round((time.perf_counter() - t0) / 2, 2)
        out[str(dtype).replace("torch.", "")] = row
        print(json.dumps({str(dtype): row}), flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
