"""``lilicorr generate``: autoregressive or speculative generation from the command line.

Both go through the one engine (``SpecEngine``): without ``--draft`` it runs the ``ar`` method,
so a ``--compare-ar`` speedup compares two runs of the same loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lilicorr.cli.common import add_runtime_args, add_spec_args, read_prompts, spec_from_args


def add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="local Hugging Face causal-LM folder")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt")
    src.add_argument(
        "--prompts",
        help="JSONL file: rows with 'messages' (chat, e.g. from `lilicorr data prompts`) or 'prompt'; "
        "optional id, category",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="wrap a plain prompt as one user message under the target's chat template (rows with "
        "'messages' always get the template)",
    )
    add_spec_args(p)  # --method, --draft, --num-speculative-tokens, …, and every method's options
    p.add_argument("--compare-ar", action="store_true", help="also decode autoregressively and print the speedup")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    add_runtime_args(p, threads=None, dtype="auto")


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.checkpoint import CheckpointError, load_draft
    from lilicorr.data.chat import row_ids
    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.config import resolve
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.runtime.dtype import resolve_dtype
    from lilicorr.runtime.runtime import TargetError, TargetRuntime

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        dtype = resolve_dtype(args.dtype)
        target = TargetRuntime.load(args.target, dtype=dtype, device=args.device)
        spec = resolve(spec_from_args(args))  # method, defaults, draft length, options: decided here, once
        draft = load_draft(spec.model, target.model.config, dtype=dtype) if spec.model else None
        engine = build_engine(target, spec, draft)
        ar_engine = build_engine(target) if args.compare_ar else None
    except (TargetError, CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    prompts = (
        [{"id": "0", "prompt": args.prompt, "category": None}]
        if args.prompt is not None
        else read_prompts(Path(args.prompts))
    )
    tok = target.tokenizer
    decode = tok.decode
    eos = frozenset(target.eos_token_ids)

    def make(rec: dict) -> Request:
        params = SamplingParams(
            max_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            ignore_eos=args.ignore_eos,
        )
        return Request(row_ids(tok, rec, chat=args.chat), params, id=str(rec["id"]), eos_ids=eos)

    totals = {"spec_tokens": 0, "spec_s": 0.0, "ar_tokens": 0, "ar_s": 0.0}
    for rec in prompts:
        try:
            req = make(rec)
        except ValueError as e:
            print(f"error: prompt {rec['id']}: {e}", file=sys.stderr)
            return 2
        printed = [0]

        def stream(r: Request, _toks: list[int], printed=printed) -> None:
            text = r.text(decode)
            sys.stdout.write(text[printed[0] :])
            sys.stdout.flush()
            printed[0] = len(text)

        if not args.json and len(prompts) > 1:
            print(f"--- {rec['id']}")
        engine.timer.seconds.clear()
        t0 = time.perf_counter()
        engine.generate([req], on_tokens=None if args.json else stream)
        dt = time.perf_counter() - t0
        n = len(req.output_ids)
        totals["spec_tokens"] += n
        totals["spec_s"] += dt
        out = {
            "id": rec["id"],
            "text": req.text(decode),
            "token_ids": req.output_ids,
            "num_generated": n,
            "finish_reason": req.finish_reason,
            "time_s": round(dt, 4),
            "tokens_per_s": round(n / dt, 2),
            "method": engine.method,
        }
        if engine.adaptive is not None:
            out["adaptive_verification"] = True
        if engine.gate is not None:
            out["draft_gate"] = True
        if engine.speculative:
            st = req.stats
            out.update(
                {
                    "tau": round(st.tau, 4),
                    "num_drafts": st.num_drafts,
                    "num_draft_tokens": st.num_draft_tokens,
                    "num_accepted_tokens": st.num_accepted_tokens,
                    "num_verified_tokens": st.num_draft_tokens,
                    "accepted_per_position": st.accepted_per_position,
                    "time_breakdown_s": engine.timer.as_dict(),
                }
            )
        if ar_engine is not None:
            ar_req = make(rec)
            t0 = time.perf_counter()
            ar_engine.generate([ar_req])
            ar_dt = time.perf_counter() - t0
            totals["ar_tokens"] += len(ar_req.output_ids)
            totals["ar_s"] += ar_dt
            out.update(
                {
                    "ar_time_s": round(ar_dt, 4),
                    "ar_tokens_per_s": round(len(ar_req.output_ids) / ar_dt, 2),
                    "speedup": round((n / dt) / (len(ar_req.output_ids) / ar_dt), 3),
                    "ar_identical": ar_req.output_ids == req.output_ids,
                }
            )
        if args.json:
            print(json.dumps(out))
        else:
            extra = f", tau={out['tau']:.2f}" if "tau" in out else ""
            extra += f", speedup x{out['speedup']:.2f} vs AR" if "speedup" in out else ""
            print(
                f"\n[{n} tokens in {dt:.2f}s: {n / dt:.1f} tokens/s{extra}, finish={req.finish_reason}]",
                file=sys.stderr,
            )
    if engine.speculative or ar_engine is not None:
        summary = {
            "summary": True,
            "method": engine.method,
            "prompts": len(prompts),
            "tau": round(engine.stats.tau, 4),
            "tokens_per_s": round(totals["spec_tokens"] / max(totals["spec_s"], 1e-9), 2),
        }
        if engine.gate is not None:
            summary["num_paused_steps"] = engine.stats.num_paused_steps
        if engine.adaptive is not None:  # predicted vs realised acceptance per draft position
            summary["num_verified_tokens"] = engine.stats.num_draft_tokens
            summary["num_proposed_tokens"] = engine.stats.num_proposed_tokens
            summary["adaptive_calibration"] = engine.adaptive.calibration()
        if ar_engine is not None:
            ar_tps = totals["ar_tokens"] / max(totals["ar_s"], 1e-9)
            summary.update({"ar_tokens_per_s": round(ar_tps, 2), "speedup": round(summary["tokens_per_s"] / ar_tps, 3)})
        print(json.dumps(summary) if args.json else f"summary: {summary}", file=sys.stdout if args.json else sys.stderr)
    return 0


def register(sub) -> None:
    s = sub.add_parser("generate", help="generate text (autoregressive or speculative)")
    add_generate_args(s)
    s.set_defaults(func=run_generate)
