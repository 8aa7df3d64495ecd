"""One training file from several (``lilicorr data merge``): regenerated first turns, later turns and fixed
answers — whole data files, or a shard folder of a run still in progress (its finished shards, in order).

Why: ``train draft`` reads one ``--data`` file and one feature cache. Rows of different lengths (512-token
first turns, 1024-token later turns) are right-padded to the longest; padding is never supervised, and the
packed feature cache stores each row only up to its last supervised column, so it costs neither disk nor
target forwards. The provenance (``OUT.json``) lists every input with its rows, answer tokens and sha256.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from lilicorr.data.atomic import atomic_write, atomic_write_text
from lilicorr.datagen.regenerate import file_sha, load_regenerated, rows_of_kind

KEYS = ("tokens", "loss_mask", "sampled")


def read_input(path: Path) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """A data file, or a shard folder's finished shards (those in its ``manifest.json``, by index)."""
    if path.is_dir():
        manifest = path / "manifest.json"
        if not manifest.exists():
            raise FileNotFoundError(f"{path}: a shard folder needs its manifest.json (made by `data regenerate`)")
        names = sorted(json.loads(manifest.read_text())["shards"])
        if not names:
            raise ValueError(f"{path}: no finished shard yet")
        files = [path / f"{n}.safetensors" for n in names]
        parts = [load_file(str(f)) for f in files]
        data = {k: torch.cat([p[k] for p in parts]) for k in KEYS}
    else:
        files, data = [path], load_regenerated(path)
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise ValueError(f"{path}: tensors {missing} missing (expected {list(KEYS)})")
    return data, [{"file": str(f), "sha256": file_sha(f)} for f in files]


def prompt_lengths(loss_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the columns before its first supervised one: the templated prompt (the whole row if none). ``[rows]``"""
    has = loss_mask.any(1)
    return torch.where(has, loss_mask.int().argmax(1), torch.full_like(has, loss_mask.shape[1], dtype=torch.long))


def rows_continuing(tokens: torch.Tensor, loss_mask: torch.Tensor, held: dict[str, torch.Tensor]) -> torch.Tensor:
    """Rows whose prompt starts with one of ``held``'s prompts: the same prompt answered otherwise (fixed
    answers), or a later turn of the same conversation (its prompt holds the held-out turn and an answer to it).
    ``[rows]`` bool."""
    lens, held_lens = prompt_lengths(loss_mask), prompt_lengths(held["loss_mask"])
    hit = torch.zeros(len(tokens), dtype=torch.bool)
    for h, n in zip(held["tokens"], held_lens.tolist(), strict=True):
        if n <= tokens.shape[1]:
            hit |= (lens >= n) & (tokens[:, :n] == h[:n]).all(1)
    return hit


def merge_data(
    inputs: list[str | Path],
    out: str | Path,
    rows: str = "all",
    held_out: str | Path | None = None,
    held_out_rows: int = 64,
) -> dict:
    """Concatenate ``inputs`` (rows in input order) into ``out``, right-padded to the longest row length;
    ``rows`` keeps only the greedy (``sampled`` False) or sampled rows — a drafter trained on greedy rows needs
    target features for those alone, half the extraction of the mixed file. ``held_out``: drop every row whose
    prompt starts with the prompt of one of that file's first ``held_out_rows`` rows (the rows a trainer's
    ``--val-data`` validates on), so that no other answer to a held-out prompt, and no later turn of a held-out
    conversation, is trained on."""
    if not inputs:
        raise ValueError("nothing to merge: give one or more data files or shard folders")
    out = Path(out)
    if any(Path(i).resolve() == out.resolve() for i in inputs):
        raise ValueError(f"{out}: the output is one of the inputs")
    datas, sources = [], []
    for i in inputs:
        data, files = read_input(Path(i))
        datas.append(data)
        sources.append({"input": str(i), "rows": int(len(data["tokens"])),
                        "answer_tokens": int(data["loss_mask"].sum()), "files": files})  # fmt: skip
    length = max(d["tokens"].shape[1] for d in datas)
    merged = {}
    for k in ("tokens", "loss_mask"):  # padding: token 0, never supervised (loss_mask False)
        merged[k] = torch.cat([torch.nn.functional.pad(d[k], (0, length - d[k].shape[1])) for d in datas])
    merged["sampled"] = torch.cat([d["sampled"] for d in datas])
    total = len(merged["tokens"])
    dropped = 0
    if held_out is not None:
        held = {k: v[:held_out_rows] for k, v in load_regenerated(held_out).items() if k in ("tokens", "loss_mask")}
        hit = rows_continuing(merged["tokens"].long(), merged["loss_mask"].bool(), {k: held[k].long() for k in held})
        dropped = int(hit.sum())
        merged = {k: v[~hit] for k, v in merged.items()}
    if rows != "all":
        keep = rows_of_kind(merged["sampled"], rows)  # [rows]
        if not bool(keep.any()):
            raise ValueError(f"--rows {rows}: none of the {total} rows of {[str(i) for i in inputs]} is {rows}")
        merged = {k: v[keep] for k, v in merged.items()}
    atomic_write(out, lambda p: save_file({k: v.contiguous() for k, v in merged.items()}, str(p)))
    meta = {
        "sequences": int(len(merged["tokens"])),
        "length": length,
        "answer_tokens": int(merged["loss_mask"].sum()),
        "sha256_16": file_sha(out)[:16],
        **({"rows": rows, "rows_of_inputs": total} if rows != "all" else {}),
        **({"held_out": {"file": str(held_out), "rows": held_out_rows, "dropped": dropped}} if held_out else {}),
        "inputs": sources,
    }
    atomic_write_text(out.with_suffix(out.suffix + ".json"), json.dumps(meta, indent=2) + "\n")
    return meta
