"""Median pre-clip gradient norm of training runs, per step range, from their ``train.log``.

Shows how often one global clip (1.0) scales a run's step: the figure behind `--clip-per-module`.

    python benchmarks/grad_norms.py runs/tiny-s-dflash runs/tiny-s-lilicorr runs/tiny-s-dflash2
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="training run folders (each with train.log)")
    ap.add_argument("--edges", type=int, nargs="+", default=[0, 100, 500, 1000, 1500])
    args = ap.parse_args()
    for run in args.runs:
        recs = [json.loads(x) for x in (Path(run) / "train.log").read_text().splitlines() if '"gnorm"' in x]
        cells = []
        for lo, hi in zip(args.edges, args.edges[1:], strict=False):
            xs = [r["gnorm"] for r in recs if lo < r["step"] <= hi]
            cells.append(f"{lo}-{hi}: {statistics.median(xs):.2f}" if xs else f"{lo}-{hi}: -")
        print(f"{run}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
