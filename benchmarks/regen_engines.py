"""Which engine makes drafter training data fastest here: ``data regenerate --engine`` side by side.

Each engine answers the same chat prompts (the target's template, every other row sampled at T=1,
EOS-terminated, ``--new-tokens`` at most) through the real ``regenerate`` code; tokens/s counts answer
tokens over the answering time (model load and server start reported apart). Then, on the first
``--identity`` prompts at T=0, each engine's answers are compared token by token with the native
engine in fp32 (the reference): the share of answer tokens before the first divergence, and how many
answers are identical.

    python benchmarks/regen_engines.py --engines native:float32 native:bfloat16 llamacpp vllm:float32

Writes ``runs/regen-engines/results.json`` and prints a Markdown table (for the data card).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lilicorr.datagen.regenerate import RegenConfig, load_regenerated, regenerate  # noqa: E402


def _run(spec: str, args, prompts: Path, n: int, fraction: float, tag: str) -> tuple[dict, dict]:
    engine, _, dtype = spec.partition(":")
    out = Path(args.work) / f"{tag}-{spec.replace(':', '-')}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = RegenConfig(target=args.target, out=str(out / "data.safetensors"), prompts=str(prompts), num_sequences=n,
                      new_tokens=args.new_tokens, max_prompt_tokens=args.max_prompt_tokens, shard_size=args.shard_size,
                      concurrency=args.concurrency, sampled_fraction=fraction, engine=engine,
                      dtype=dtype or "float32", threads=args.threads)  # fmt: skip
    t0 = time.time()
    meta = regenerate(cfg)
    wall = time.time() - t0
    shards = json.loads((out / "data.safetensors.shards" / "manifest.json").read_text())["shards"]
    answering = sum(s["seconds"] for s in shards.values())
    row = {
        "engine": spec,
        "prompts": meta["sequences"],
        "answer_tokens": meta["answer_tokens"],
        "answering_s": round(answering, 1),
        "startup_s": round(wall - answering, 1),
        "tokens_per_s": round(meta["answer_tokens"] / answering, 1),
    }
    return row, load_regenerated(out / "data.safetensors")


def _agreement(ref: dict, other: dict) -> dict:
    """Per answer: tokens before the first difference, over the reference answer's length."""
    same = identical = total = 0
    rows = zip(ref["tokens"], ref["loss_mask"], other["tokens"], other["loss_mask"], strict=True)
    for r_tok, r_mask, o_tok, o_mask in rows:
        a, b = r_tok[r_mask].tolist(), o_tok[o_mask].tolist()
        k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        same, total = same + k, total + len(a)
        identical += a == b
    return {"prefix_share": round(same / max(total, 1), 4), "identical": f"{identical}/{len(ref['tokens'])}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--prompts", default="data/prompts/sharegpt.jsonl")
    ap.add_argument("--skip", type=int, default=8192, help="take prompts from this row on (away from the data job's)")
    ap.add_argument("--num", type=int, default=256)
    ap.add_argument("--identity", type=int, default=32, help="T=0 prompts compared with native fp32 (0: skip)")
    ap.add_argument("--engines", nargs="+", default=["native:float32", "native:bfloat16", "llamacpp", "vllm:float32"])
    ap.add_argument("--identity-only", nargs="*", default=[], help="engines compared at T=0 but not timed here")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--max-prompt-tokens", type=int, default=256)
    ap.add_argument("--shard-size", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="runs/regen-engines")
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    lines = Path(args.prompts).read_text(encoding="utf-8").rstrip("\n").split("\n")[args.skip :]
    prompts = Path(args.work) / "prompts.jsonl"
    prompts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    results = {"args": vars(args), "speed": [], "identity": []}
    for spec in args.engines:
        row, _ = _run(spec, args, prompts, args.num, 0.5, "speed")
        results["speed"].append(row)
        print(json.dumps(row), flush=True)
    if args.identity:
        _, ref = _run("native:float32", args, prompts, args.identity, 0.0, "greedy")
        for spec in args.engines + args.identity_only:
            if spec != "native:float32":
                _, data = _run(spec, args, prompts, args.identity, 0.0, "greedy")
                results["identity"].append({"engine": spec, **_agreement(ref, data)})
                print(json.dumps(results["identity"][-1]), flush=True)
    (Path(args.work) / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n| engine | answer tokens | tokens/s | startup s | T=0 prefix share vs native fp32 | identical answers |")
    print("|---|---|---|---|---|---|")
    ident = {r["engine"]: r for r in results["identity"]}
    for r in results["speed"]:
        i = ident.get(r["engine"], {"prefix_share": "reference", "identical": "—"})
        print(f"| {r['engine']} | {r['answer_tokens']} | {r['tokens_per_s']} | {r['startup_s']} | "
              f"{i['prefix_share']} | {i['identical']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
