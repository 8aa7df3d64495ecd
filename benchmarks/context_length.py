"""Acceptance vs context length: the same long test documents cut to their last L tokens.

Drafters here are trained on 256-token sequences; this shows how τ falls as the context grows past
that (greedy, batch 1, the drafter's native method).

    python benchmarks/context_length.py --draft models/tiny-s-dflash
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.data.prompts import long_prompts
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/tiny-s")
    ap.add_argument("--draft", default="models/tiny-s-dflash")
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 2560])
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = TargetRuntime.load(args.target)
    draft = load_draft(args.draft, target.model.config)
    docs = long_prompts(Path(args.corpus), target.tokenizer, args.num_prompts, prompt_tokens=max(args.lengths))
    ids = [target.tokenizer.encode(p["prompt"], add_special_tokens=False) for p in docs]
    print("context_tokens  tau")
    for n in args.lengths:
        engine = build_engine(target, SpecConfig(), draft, args.draft)  # the folder decides (vLLM's rule)
        for row in ids:  # batch 1, the same document endings at every length
            engine.generate([Request(row[-n:], SamplingParams(max_tokens=args.max_new_tokens, ignore_eos=True))])
        print(f"{n:14d}  {engine.stats.tau:.3f}")


if __name__ == "__main__":
    main()
