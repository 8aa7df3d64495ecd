"""Shards of one feature cache reused by another (``lilicorr data features --reuse DIR``).

Why: training files are merged from parts (``data merge``: the greedy first turns, then ShareGPT's own answers or
the later turns), and every merge is a new file with a new cache. A cache of a merge that starts with rows
another cache already holds would run the target over them again — for the SmolLM2 greedy first turns ≈ 1.2 M
positions, half an hour of both cores here. A shard is taken from the other cache only when it holds exactly the
same rows (token for token up to each row's last supervised column, so the right padding of either file does not
matter) under the same target, layers, storage dtype, layout and shard size; the target's features of a row
depend on that row alone, so the shard is the one this extraction would write. It is hard-linked (no second
copy on the disk) or, across file systems, copied.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from lilicorr.data.atomic import atomic_write
from lilicorr.features.rows import data_digest, row_lengths

# what must agree for a shard of the other cache to be this cache's shard (besides its rows)
SAME_STORAGE = ("target", "layer_ids", "hidden_size", "shard_size", "dtype", "layout")


def reusable_shards(donor_dir: str | Path, meta: dict, tokens: torch.Tensor, lens: torch.Tensor) -> dict[int, Path]:
    """Shard index → the other cache's shard file holding exactly this cache's rows of that shard.

    ``meta`` is this cache's meta; ``tokens [rows, L]`` and ``lens [rows]`` its rows and each row's stored length.
    A donor made for other storage is refused (ValueError naming the field), not silently skipped; one whose data
    file is gone or changed likewise, since its rows could not be compared."""
    from lilicorr.datagen.regenerate import load_regenerated

    donor = Path(donor_dir)
    if not (donor / "meta.json").exists():
        raise FileNotFoundError(f"{donor}/meta.json: not found (--reuse takes a folder made by `data features`)")
    dmeta = json.loads((donor / "meta.json").read_text())
    for key in SAME_STORAGE:
        if dmeta.get(key) != meta.get(key):
            raise ValueError(
                f"{donor}: cannot reuse its shards: {key} is {dmeta.get(key)!r} there, {meta.get(key)!r} here"
            )
    ddata = load_regenerated(dmeta["data"])
    if data_digest(ddata["tokens"]) != dmeta["data_sha256_16"]:
        raise ValueError(f"{donor}: its data {dmeta['data']} changed since the cache was made (sha256 differs)")
    dtok, dlens = ddata["tokens"].long(), row_lengths(ddata["loss_mask"].bool())  # [donor rows, ·], [donor rows]
    size = int(meta["shard_size"])
    found: dict[int, Path] = {}
    for si in range((min(len(tokens), len(dtok)) + size - 1) // size):
        lo, hi = si * size, (si + 1) * size
        mine, theirs = lens[lo:hi], dlens[lo:hi]  # the same rows, also in number (not one file's partial last shard)
        if len(mine) != len(theirs) or not torch.equal(mine, theirs):
            continue
        path = donor / f"{si:05d}.safetensors"
        same = all(torch.equal(tokens[lo + r, :n], dtok[lo + r, :n]) for r, n in enumerate(mine.tolist()))
        if same and path.exists():
            found[si] = path
    return found


def link_shard(src: Path, dst: Path) -> None:
    """``dst`` becomes the shard ``src``: a hard link where both lie on one file system, else an atomic copy."""
    try:
        os.link(src, dst)
    except OSError:
        atomic_write(dst, lambda p: shutil.copyfile(src, p))
