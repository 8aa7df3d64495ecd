"""Two bench runs side by side: τ and tokens/s ratio (each to its own run's AR) per arm × temperature.

Used to check that a refactor changed no figure beyond noise:

    python benchmarks/compare_results.py runs/bench-smollm2/results.json runs/bench-smollm2-v2/results.json
"""

from __future__ import annotations

import argparse
import json


def index(path: str) -> dict:
    with open(path) as f:
        runs = json.load(f)["runs"]
    ar = {r["temperature"]: r["tokens_per_s"] for r in runs if r["arm"]["method"] == "ar"}
    return {
        (r["arm"]["name"], r["temperature"]): (r["pooled"]["tau"], r["tokens_per_s"] / ar[r["temperature"]], r)
        for r in runs
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    args = ap.parse_args()
    old, new = index(args.old), index(args.new)
    print("| T | arm | τ old | τ new | Δτ | speed×AR old | speed×AR new | outputs identical |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(set(old) & set(new), key=lambda k: (k[1], k[0])):
        (to, so, ro), (tn, sn, rn) = old[key], new[key]
        same = ro["outputs"] == rn["outputs"]
        print(f"| {key[1]:g} | {key[0]} | {to:.3f} | {tn:.3f} | {tn - to:+.3f} | {so:.2f} | {sn:.2f} | {same} |")
    only = sorted(set(new) - set(old))
    if only:
        print("\nnew arms only:", ", ".join(f"{n}@T={t:g}" for n, t in only))


if __name__ == "__main__":
    main()
