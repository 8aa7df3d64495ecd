"""Disk bytes and time to read random training rows from a packed feature cache: safetensors' memory map against
``FeatureStore`` (``pread`` without readahead, ``features/shard_reader.py``), alternating sets of distinct rows.

Why: training draws rows in random order; on a cache larger than memory every row comes from disk, and the memory
map's read-around read 3–6× the rows' bytes (session 19). Disk bytes are this process's ``read_bytes`` in
``/proc/self/io`` (Linux); rows already in the page cache cost none, so run it on a cache larger than memory, and
read the times as noisy (the page cache differs between sets).

Usage: python benchmarks/feature_reads.py --features data/cache/features-smollm2-first-greedy-turns \
    --first-row 4300 --rows 160 --reps 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors import safe_open

from lilicorr.features.cache import FeatureStore


def disk_read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no read_bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", required=True)
    ap.add_argument("--first-row", type=int, default=0, help="draw rows from here on (e.g. past the cached part)")
    ap.add_argument("--rows", type=int, default=160, help="rows per set")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    store = FeatureStore(args.features)
    if not store.packed:
        raise SystemExit(f"{args.features}: not a packed cache")
    total, size = store.meta["sequences"], store.shard_size
    perm = torch.randperm(total - args.first_row, generator=torch.Generator().manual_seed(args.seed)) + args.first_row
    if len(perm) < 2 * args.reps * args.rows:
        raise SystemExit(f"--rows × 2 × --reps = {2 * args.reps * args.rows} exceeds the {len(perm)} rows drawn from")
    handles: dict[int, object] = {}

    def mmap_row(i: int) -> int:  # bytes of the row, its values touched as training touches them
        si, j = divmod(i, size)
        if si not in handles:
            handles[si] = safe_open(str(Path(args.features) / f"{si:05d}.safetensors"), framework="pt")
        h = handles[si]
        a, b = (int(x) for x in h.get_slice("offsets")[j : j + 2])
        rows = [h.get_slice(name)[a:b] for name in ("taps", "final")]
        return sum(int(r.float().sum().isfinite()) * r.numel() * r.element_size() for r in rows)

    def pread_row(i: int) -> int:
        taps, final = store.get(torch.tensor([i]))
        reader, offsets = store._reader(i // size)
        n = int(offsets[i % size + 1] - offsets[i % size])
        return int(taps.float().sum().isfinite()) * n * (taps.shape[2] + final.shape[2]) * taps.element_size()

    out = []
    for rep in range(args.reps):
        for kind, read in (("mmap", mmap_row), ("pread", pread_row)):
            idx, perm = perm[: args.rows].tolist(), perm[args.rows :]
            b0, t0 = disk_read_bytes(), time.perf_counter()
            need = sum(read(i) for i in idx)
            row = {
                "rep": rep,
                "reader": kind,
                "disk_mb": round((disk_read_bytes() - b0) / 1e6, 1),
                "rows_mb": round(need / 1e6, 1),
                "seconds": round(time.perf_counter() - t0, 2),
            }
            print(json.dumps(row), flush=True)
            out.append(row)
    for kind in ("mmap", "pread"):
        d = sum(r["disk_mb"] for r in out if r["reader"] == kind)
        n = sum(r["rows_mb"] for r in out if r["reader"] == kind)
        print(f"{kind}: disk {d:.0f} MB for {n:.0f} MB of rows ({d / n:.2f}×)")


if __name__ == "__main__":
    main()
