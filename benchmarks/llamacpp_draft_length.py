"""What a drafting cycle costs in llama-server, by draft length and target quantization, and so which τ pays.

llama-server verifies every drafted token in one target batch. On a 2-core CPU a 135M Q4_1 step is not bound by
memory alone, so a longer verify batch costs more; this sweeps ``--spec-draft-n-max`` for the shipped DFlash
drafter (full vocabulary and the 16 k draft vocabulary) on the shipped Q4_1 target and on a Q8_0 one written from
the same folder by llama.cpp's own ``convert_hf_to_gguf.py`` (llama.cpp has tiled batch kernels for Q8_0, not for
Q4_1). Per arm: tokens/s, × that target's AR, τ, and the cycle (τ over tokens/s) in ms and in plain steps; the
break-even τ of an arm is its cycle in plain steps. Run it alone on the machine (the campaigns paused):

    python benchmarks/llamacpp_draft_length.py --prompts 12
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from lilicorr.bench.llamacpp import LlamaServer, chat, export_drafters, pooled
from lilicorr.bench.runner import environment
from lilicorr.data.prompt_sets import load_set
from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_TARGET

CONVERT = Path("build/llama.cpp/src/convert_hf_to_gguf.py")


def q8_target(out: Path) -> Path:
    """The target as Q8_0, converted from the folder (itself dequantized from the shipped Q4_1 GGUF)."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(CONVERT), SHIPPED_TARGET, "--outtype", "q8_0", "--outfile", str(out)]
        subprocess.run(cmd, check=True, capture_output=True)
    return out


def drafters(out_dir: Path) -> dict[str, Path]:
    plan = [
        ("DFlash", SHIPPED_DFLASH, {}, "full"),
        ("DFlash@16k", SHIPPED_DFLASH, {"draft_vocab": 16384}, "draft_vocab16384"),
    ]
    return export_drafters(plan, SHIPPED_TARGET, out_dir)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=12, help="MT-Bench prompts, one per category first, then code")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1, 2, 3, 5, 7])
    args = ap.parse_args()
    rows = load_set("mt-bench")
    prompts = (rows[::10] + load_set("humaneval")[::41])[: args.prompts]
    targets = {"Q4_1 (shipped)": Path(SHIPPED_TARGET + ".gguf"), "Q8_0": q8_target(Path("build/gguf/target-q8_0.gguf"))}
    arms = drafters(Path("build/gguf"))
    table = []
    for tname, target in targets.items():
        ar = None
        for arm, draft in [("AR", None)] + [(a, d) for a, d in arms.items()]:
            for n in [1] if draft is None else args.lengths:
                with LlamaServer(target, draft, threads=args.threads, draft_tokens=n) as server:
                    chat(server, prompts[0], 8)  # warm-up
                    st = pooled([chat(server, row, args.max_tokens) for row in prompts])
                tps, tau = st["tokens_per_s"], st["tau"] or 1.0
                ar = ar or tps
                cycle = tau / tps * 1000
                table.append(
                    (tname, arm if draft is None else f"{arm}, n_max {n}", tps, tps / ar, tau, cycle, cycle * ar / 1000)
                )
                print(table[-1], flush=True)
    m = environment()
    print(f"\n{m['cpu']}, {m['cores']} cores; llama-server -t {args.threads}, llama.cpp's default OpenMP wait; "
          f"{len(prompts)} prompts, {args.max_tokens} tokens, T=0\n")  # fmt: skip
    print("| target | arm | tokens/s | × its AR | τ | cycle ms | cycle in plain steps (τ that breaks even) |")
    print("|---|---|---|---|---|---|---|")
    for t, arm, tps, x, tau, cycle, steps in table:
        print(f"| {t} | {arm} | {tps:.1f} | {x:.2f}× | {tau:.3f} | {cycle:.1f} | {steps:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
