"""One server at a time, a few concurrency levels, and the load policy's decisions from ``/metrics``.

``lilicorr bench serve`` keeps every arm's server up for the whole run; this starts one server, drives it, stops it,
then the next, so a result that differs between the two settings points at the servers' coexistence rather than at
the policy. Same prompts and request shape as the bench (``bench.serve``: ShareGPT, MT-Bench, HumanEval in turn).

    python benchmarks/serve_one_level.py --draft models/smollm2-lilicorr --concurrency 1 2 --requests 24
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import httpx

from lilicorr.bench.serve import OurServer, ServeArm, ServeBenchConfig, drive, serve_prompts

COUNTERS = ("lilicorr:spec_decode_policy_steps_total", "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_accepted_tokens_total")  # fmt: skip


def counters(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(COUNTERS):
            name = line.split(" ")[0].replace('model_name="bench"', "").replace(",}", "}").replace("{}", "")
            out[name] = float(line.split()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cfg = ServeBenchConfig(args.target, [], concurrencies=args.concurrency, requests_per_level=args.requests,
                           max_tokens=args.max_tokens, threads=args.threads)  # fmt: skip
    prompts = serve_prompts(args.requests)
    for arm in (ServeArm("plain"), ServeArm("draft", {"model": args.draft})):
        with OurServer(cfg, arm, Path(f"runs/serve-one-level/{arm.name}.log")) as srv:
            asyncio.run(drive(srv.url, "bench", prompts, 1, 2, cfg))  # warm-up, as the bench does
            for c in args.concurrency:
                before = counters(srv.url)
                level = asyncio.run(drive(srv.url, "bench", prompts, c, max(args.requests, 2 * c), cfg))
                delta = {k: v - before.get(k, 0.0) for k, v in counters(srv.url).items()}
                print(f"{arm.name} c={c}: {level['output_tok_s']} tok/s, errors {level['errors']}, {delta}", flush=True)


if __name__ == "__main__":
    main()
