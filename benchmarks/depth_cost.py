"""The cost of drafter depth in the engine, from a `lilicorr bench` results file of chain arms whose drafters
differ only in depth (made by scripts/depth_cost_smollm2.sh): per cycle, the draft pass and the target's verify
pass in milliseconds, the cycle against a plain AR step, and the τ each depth needs for the tokens/s that the
first (shallowest) arm would get at a given τ.

    python benchmarks/depth_cost.py runs/depth/bench/results.json [--tau 1.35]

Why this shape: tokens/s of a chain is τ / cycle time, so a deeper drafter pays only where its τ grows at
least in proportion to its cycle; the learning curves give the τ a depth reaches in a given training time.
"""

from __future__ import annotations

import argparse
import json


def depth_rows(results: dict) -> list[dict]:
    """Per chain arm: cycles, draft and verify ms per cycle, cycle ms, and the paired AR step in ms."""
    rows = []
    for run in results["runs"]:
        if run["arm"]["method"] == "ar" or run["temperature"] != 0:
            continue
        cycles = run["pooled"]["num_drafts"]
        t = run["time_breakdown_s"]
        draft_s = t["draft_backbone"] + t.get("candidates", 0) + t.get("head", 0) + t.get("walk", 0)
        ar_step_ms = 1000 / run["paired_ar_tokens_per_s"]
        rows.append(
            {
                "arm": run["arm"]["name"],
                "cycles": cycles,
                "draft_ms": 1000 * draft_s / cycles,
                "verify_ms": 1000 * t["target_verify"] / cycles,
                "cycle_ms": 1000 * sum(t.values()) / cycles,
                "ar_step_ms": ar_step_ms,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results.json of `lilicorr bench`")
    ap.add_argument("--tau", type=float, default=1.35, help="the shallowest arm's τ to match (default 1.35)")
    args = ap.parse_args()
    with open(args.results) as f:
        rows = depth_rows(json.load(f))
    if not rows:
        raise SystemExit(f"{args.results}: no chain arm at T=0")
    base = rows[0]["cycle_ms"]
    print("| arm | cycles | draft ms | verify ms | cycle ms | cycle / AR step | τ for equal tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        need = args.tau * r["cycle_ms"] / base
        print(
            f"| {r['arm']} | {r['cycles']} | {r['draft_ms']:.1f} | {r['verify_ms']:.1f} | {r['cycle_ms']:.1f} "
            f"| {r['cycle_ms'] / r['ar_step_ms']:.2f} | {need:.3f} |"
        )
    print(f"\nτ for equal tokens/s: the τ each arm needs to match {rows[0]['arm']} at τ {args.tau}.")


if __name__ == "__main__":
    main()
