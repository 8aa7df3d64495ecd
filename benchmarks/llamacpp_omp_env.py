"""How much OpenMP's wait policy changes llama-server's speed, plain and with our GGUF drafters.

Our commands export ``OMP_WAIT_POLICY=PASSIVE`` for torch (so idle threads sleep beside the training campaign).
Until session 35 every llama-server our benchmarks started inherited it; llama.cpp's OpenMP build ends every
graph node in ``#pragma omp barrier``, so PASSIVE sleeps and wakes the second thread hundreds of times a token.
Users run llama-server with libgomp's default wait (a bounded spin), which ``runtime.llama_server.llama_env`` now
gives it. This measures both, arm by arm, each server alone, the two environments alternating per round: AR, the
shipped DFlash drafter, and the shipped LiLiCorr drafter with its head and as its backbone alone. Run it alone on
the machine (the campaigns paused):

    python benchmarks/llamacpp_omp_env.py --prompts 10 --rounds 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lilicorr.bench.llamacpp import LlamaServer, chat, export_drafters, pooled
from lilicorr.bench.runner import environment
from lilicorr.data.prompt_sets import load_set
from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_DRAFT, SHIPPED_TARGET

ENVS = {"default": {}, "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}}


def drafter_arms(out_dir: Path) -> dict[str, Path | None]:
    """AR and the shipped drafters as GGUF, named as ``llamacpp_speed.py`` names them."""
    plan = [("DFlash", SHIPPED_DFLASH, {}, "full"), ("LiLiCorr (head + walk)", SHIPPED_DRAFT, {}, "full"),
            ("LiLiCorr backbone alone", SHIPPED_DRAFT, {"backbone_only": True}, "backbone")]  # fmt: skip
    return {"llama.cpp AR": None, **export_drafters(plan, SHIPPED_TARGET, out_dir)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=10, help="MT-Bench prompts, one per category first, then code")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = load_set("mt-bench")
    prompts = (rows[::10] + load_set("humaneval")[::41])[: args.prompts]
    arms = drafter_arms(Path("build/gguf"))
    speed: dict[tuple[str, str], list[float]] = {}
    tau: dict[str, float | None] = {}
    for r in range(args.rounds):
        for env_name in list(ENVS)[:: 1 if r % 2 == 0 else -1]:
            for arm, draft in arms.items():
                with LlamaServer(SHIPPED_TARGET + ".gguf", draft, threads=args.threads, env=ENVS[env_name]) as s:
                    chat(s, prompts[0], 8)  # warm-up
                    stats = pooled([chat(s, row, args.max_tokens) for row in prompts])
                speed.setdefault((arm, env_name), []).append(stats["tokens_per_s"])
                tau[arm] = stats["tau"]
                print(f"round {r + 1} {env_name:8s} {arm}: {stats['tokens_per_s']} tokens/s, tau {stats['tau']}")
    m = environment()
    print(
        f"\n{m.get('cpu')}, {m.get('cores')} cores; llama-server -t {args.threads}; {len(prompts)} prompts, "
        f"{args.max_tokens} tokens, T=0; best of {args.rounds} round(s) per cell\n"
    )
    print("| arm | τ | tokens/s, default env | × AR | tokens/s, OMP_WAIT_POLICY=PASSIVE | × AR |")
    print("|---|---|---|---|---|---|")
    ar = {e: max(speed[("llama.cpp AR", e)]) for e in ENVS}
    for arm in arms:
        cells = [f"{max(speed[(arm, e)]):.1f} | {max(speed[(arm, e)]) / ar[e]:.2f}×" for e in ENVS]
        print(f"| {arm} | {tau[arm] or '-'} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
