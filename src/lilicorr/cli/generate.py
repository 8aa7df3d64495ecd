"""``lilicorr generate``: plain autoregressive or speculative generation from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="local Hugging Face causal-LM folder")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt")
    src.add_argument("--prompts", help="JSONL file with fields id, prompt, optional category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")


def read_prompts(path: Path) -> list[dict]:
    """Prompts JSONL: ``id`` and ``prompt`` required, ``category`` optional, other fields ignored."""
    if not path.exists():
        raise SystemExit(f"error: prompts file {path} not found")
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"error: {path}:{n}: not valid JSON ({e.msg})") from e
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str):
            raise SystemExit(f"error: {path}:{n}: field 'prompt' (string) is missing")
        records.append({"id": str(rec.get("id", n)), "prompt": rec["prompt"], "category": rec.get("category")})
    if not records:
        raise SystemExit(f"error: {path}: no prompts")
    return records


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.decoding.autoregressive import generate_autoregressive
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.target.runtime import TargetError, TargetRuntime

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        target = TargetRuntime.load(args.target)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    prompts = (
        [{"id": "0", "prompt": args.prompt, "category": None}]
        if args.prompt is not None
        else read_prompts(Path(args.prompts))
    )
    tok = target.tokenizer
    decode = tok.decode
    for rec in prompts:
        params = SamplingParams(
            max_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        )
        try:
            req = Request(
                tok.encode(rec["prompt"], add_special_tokens=False),
                params,
                id=rec["id"],
                eos_ids=frozenset(target.eos_token_ids),
            )
        except ValueError as e:
            print(f"error: prompt {rec['id']}: {e}", file=sys.stderr)
            return 2
        printed = [0]

        def stream(_i: int, r: Request, printed=printed) -> None:
            text = r.text(decode)
            sys.stdout.write(text[printed[0] :])
            sys.stdout.flush()
            printed[0] = len(text)

        if not args.json and len(prompts) > 1:
            print(f"--- {rec['id']}")
        generate_autoregressive(target, [req], on_commit=None if args.json else stream)
        dt = req.t_end - req.t_start
        n = len(req.output_ids)
        if args.json:
            print(
                json.dumps(
                    {
                        "id": rec["id"],
                        "text": req.text(decode),
                        "token_ids": req.output_ids,
                        "num_generated": n,
                        "finish_reason": req.finish_reason,
                        "time_s": round(dt, 4),
                        "tokens_per_s": round(n / dt, 2),
                    }
                )
            )
        else:
            print(
                f"\n[{n} tokens in {dt:.2f}s: {n / dt:.1f} tokens/s, finish={req.finish_reason}]",
                file=sys.stderr,
            )
    return 0
