"""Cached target features for drafter training (``lilicorr data features``).

Why: a drafter step needs the target's tapped hidden states for every training sequence, and the
head loss needs the target's distribution at the drafted positions. Recomputing the frozen
target's full forward on every step, for every drafter trained on the same data, is most of the
training cost on a CPU (SmolLM2: a 4 × 256-token forward takes as long as the drafter's own step).
The features are extracted once and read back by every run: the taps at ``layer_ids`` and the
target's final-normed hidden state, from which the LM head rebuilds the target's logits only where a
loss needs them (``lm_head(final) == logits``, which the trainer's online path relies on too).

Layout: ``DIR/meta.json`` plus shards ``DIR/NNNNN.safetensors`` of ``shard_size`` sequences each,
``taps`` and ``final`` (``[Σ rows' lengths, len(layer_ids)·H]`` and ``[Σ, H]``, bf16 by default) with
``offsets [n + 1]`` (``--dtype float8_e4m3fn``: fp8 ``taps``/``final`` and their per-channel fp32 ``taps_scale`` /
``final_scale``, read back as bf16): rows packed back to back, each up to its own last supervised column (layout
``packed``; caches from before it hold ``[n, L, ·]`` padded to the data's longest supervised prefix ``L``).
Shards are written atomically, so an interrupted extraction resumes;
``extraction.json`` logs each shard's positions, seconds and bytes (``extraction_report``: disk use, positions/s).
"""

from __future__ import annotations

import inspect
import json
import shutil
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from lilicorr.data.atomic import atomic_write, atomic_write_text
from lilicorr.features.reuse import link_shard, reusable_shards
from lilicorr.features.rows import data_digest, row_lengths
from lilicorr.features.shard_reader import ShardReader
from lilicorr.runtime.dtype import resolve_dtype


def supervised_length(loss_mask: torch.Tensor) -> int:
    """Columns needed to train on every supervised token (the longest row's last masked column + 1)."""
    cols = loss_mask.any(0).nonzero()
    return int(cols.max()) + 1 if len(cols) else 0


FP8 = "float8_e4m3fn"  # a storage dtype only: the target computes in bf16, the cache keeps 1 byte a value
FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [positions, C]`` as fp8 with one fp32 scale per channel ``[C]`` (its absolute max over the shard /
    448). Per channel, not per position: the residual stream's few massive channels would otherwise push every
    ordinary value of the same position into fp8's subnormals."""
    scale = (x.float().abs().amax(0) / FP8_MAX).clamp_min(1e-12)  # [C]
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``[positions, C]`` bf16 (what a bf16 cache would hold, within fp8's 3 mantissa bits)."""
    return (q.float() * scale).to(torch.bfloat16)


@torch.no_grad()
def target_features(model, tokens: torch.Tensor, layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One frozen forward: taps ``[b, t, F·H]`` and final-normed hidden ``[b, t, H]``."""
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=tokens, output_hidden_states=True, **keep)  # no [b, t, V] logits where it can
    taps = torch.cat([out.hidden_states[i + 1] for i in layer_ids], -1)
    return taps, out.hidden_states[-1]


def extract_features(
    target_dir: str,
    data_path: str,
    out_dir: str,
    layer_ids: list[int],
    batch_size: int = 4,
    shard_size: int = 64,
    dtype: str = "bfloat16",
    device: str = "cpu",
    max_sequences: int = 0,
    reuse: str | None = None,
    compute_dtype: str = "auto",
) -> dict:
    """Cache the target's taps for ``data_path`` in ``out_dir``, shard by shard (resumable). With
    ``max_sequences`` only the shards covering the first N rows are made now (a trainer's
    ``--max-sequences N`` needs no more); the meta stays that of the whole file, so a later call extends it.
    ``reuse``: another cache whose shards holding exactly these rows are linked instead of recomputed
    (``features.reuse``). ``dtype`` is how the cache stores values; ``compute_dtype`` what the target runs in:
    ``auto`` is bf16 only where this machine multiplies it natively (``runtime.dtype``) — on an AVX2-only CPU bf16
    matmuls are ≈ 5× slower than fp32, so a bf16 cache is computed in fp32 there and rounded once when stored.
    The compute dtype is not part of the cache's identity (shards of one cache may come from two machines); each
    shard's is logged in ``extraction.json``."""
    from lilicorr.datagen.regenerate import load_regenerated
    from lilicorr.runtime.runtime import TargetRuntime

    data = load_regenerated(data_path)
    tokens, mask = data["tokens"].long(), data["loss_mask"].bool()
    length = supervised_length(mask)
    tokens = tokens[:, :length]
    compute = resolve_dtype(compute_dtype)
    target = TargetRuntime.load(target_dir, dtype=compute)
    target.set_layer_ids(tuple(layer_ids))
    model = target.model.to(device)
    out = Path(out_dir)
    meta = {
        "target": str(target_dir),
        "data": str(data_path),
        "data_sha256_16": data_digest(data["tokens"]),
        "sequences": len(tokens),
        "length": length,
        "layer_ids": list(layer_ids),
        "hidden_size": target.hidden_size,
        "shard_size": shard_size,
        "dtype": dtype,
    }
    if dtype == FP8 and old_layout_padded(out):
        raise ValueError(f"{out}: fp8 storage needs the packed layout; this cache is padded (use a new --out)")
    old = out / "meta.json"
    # packed: each shard stores its rows back to back, each only up to its own last supervised column (no
    # padding: ~45 % of the ShareGPT first-turn rows' columns); caches made before keep the padded layout
    packed = not old.exists() or json.loads(old.read_text()).get("layout") == "packed"
    if packed:
        meta["layout"] = "packed"
    if old.exists() and json.loads(old.read_text()) != meta:
        raise ValueError(f"{old}: written for other data, target or layers; use a new --out or delete it")
    if reuse and not packed:
        raise ValueError(f"{out}: --reuse needs the packed layout; this cache is padded (use a new --out)")
    row_lens = row_lengths(mask)  # [rows]
    donated = reusable_shards(reuse, meta, tokens, row_lens) if reuse else {}  # a refused donor: nothing written yet
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(old, json.dumps(meta, indent=2) + "\n")
    wanted = min(len(tokens), max_sequences) if max_sequences > 0 else len(tokens)
    n_shards = (wanted + shard_size - 1) // shard_size
    # bf16 halves the cache; fp32 keeps online training bit-comparable; fp8 (per-channel scales) halves it again
    store_dtype = getattr(torch, dtype)
    width = (len(layer_ids) + 1) * target.hidden_size  # taps + final per stored position
    log_path = out / "extraction.json"  # per shard: positions, seconds, bytes (the rate and disk use reported)
    log = json.loads(log_path.read_text()) if log_path.exists() else {}  # shard name -> its entry
    if reuse:  # before the disk check: linked shards take no room
        for si, src in donated.items():
            path = out / f"{si:05d}.safetensors"
            if si < n_shards and not path.exists():
                link_shard(src, path)
                stored = int(row_lens[si * shard_size : (si + 1) * shard_size].sum())
                log[path.name] = {"positions": stored, "seconds": 0, "bytes": path.stat().st_size, "reused": str(src)}
        atomic_write_text(log_path, json.dumps(log, indent=1) + "\n")
    check_disk(out, tokens, mask, shard_size, wanted, packed, width * store_dtype.itemsize)
    t0 = time.time()
    for si in tqdm(range(n_shards), desc="features", mininterval=5):
        path = out / f"{si:05d}.safetensors"
        if path.exists():
            continue
        rows = tokens[si * shard_size : (si + 1) * shard_size]
        lens = row_lengths(mask[si * shard_size : (si + 1) * shard_size]) if packed else None
        taps, final = [], []
        keep = store_dtype if dtype != FP8 else torch.bfloat16  # fp8 is quantized from bf16 below, per shard
        if packed:  # rows of like length batched together (less padding); stored back in row order
            order = lens.argsort(stable=True)
            per_row: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            for i in range(0, len(rows), batch_size):
                idx = order[i : i + batch_size]
                cols = int(lens[idx].max())  # causal: later columns unused
                t, f = target_features(model, rows[idx, :cols].to(device), layer_ids)  # [b, cols, F·H], [b, cols, H]
                t, f = t.to("cpu", keep), f.to("cpu", keep)
                for j, r in enumerate(idx.tolist()):
                    per_row[r] = (t[j, : lens[r]], f[j, : lens[r]])
            taps = [per_row[r][0] for r in range(len(rows))]  # [Σ len, F·H] once concatenated
            final = [per_row[r][1] for r in range(len(rows))]
        else:
            for i in range(0, len(rows), batch_size):
                t, f = target_features(model, rows[i : i + batch_size].to(device), layer_ids)
                taps.append(t.to("cpu", keep))
                final.append(f.to("cpu", keep))
        tensors = {"taps": torch.cat(taps).contiguous(), "final": torch.cat(final).contiguous()}
        if dtype == FP8:  # [Σ len, C] fp8 and [C] fp32 scales, per shard
            for name in ("taps", "final"):
                tensors[name], tensors[f"{name}_scale"] = quantize_fp8(tensors[name])
        if packed:
            tensors["offsets"] = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])  # [rows + 1]
        atomic_write(path, lambda p, t=tensors: save_file(t, str(p)))
        stored = int(lens.sum()) if packed else int(rows.numel())
        log[path.name] = {"positions": stored, "seconds": round(time.time() - t0, 2), "bytes": path.stat().st_size,
                          "compute": str(compute).removeprefix("torch.")}  # fmt: skip
        atomic_write_text(out / "extraction.json", json.dumps(log, indent=1) + "\n")
        t0 = time.time()
    return {**meta, **extraction_report(out)}


def old_layout_padded(out: Path) -> bool:
    meta = out / "meta.json"
    return meta.exists() and json.loads(meta.read_text()).get("layout") != "packed"


def check_disk(
    out: Path,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    shard_size: int,
    wanted: int,
    packed: bool,
    bytes_per_position: int,
    free: int | None = None,
) -> int:
    """Refuse, before the first forward, an extraction whose missing shards will not fit on ``out``'s disk
    (a full disk would stop it hours in, after filling the disk for every other job); the message names the
    sizes and the ``--max-sequences`` that would fit. Returns the bytes still to write."""
    lens = row_lengths(mask[:wanted]) if packed else torch.full((wanted,), tokens.shape[1])  # [wanted]
    todo = [si for si in range((wanted + shard_size - 1) // shard_size) if not (out / f"{si:05d}.safetensors").exists()]
    need = sum(int(lens[si * shard_size : (si + 1) * shard_size].sum()) for si in todo) * bytes_per_position
    free = shutil.disk_usage(out).free if free is None else free
    if need > free:
        fits = int((lens.cumsum(0) * bytes_per_position <= free).sum())  # rows that fit from scratch (at least)
        fits = fits // shard_size * shard_size
        raise OSError(
            f"{out}: the feature cache needs {need / 2**30:.1f} GiB more for {wanted} rows, the disk has "
            f"{free / 2**30:.1f} GiB free; free space, or extract fewer rows (--max-sequences {fits} fits)"
        )
    return need


def extraction_report(folder: str | Path) -> dict:
    """Disk use and extraction rate of a feature cache, from its ``extraction.json`` (shards made by this
    version; positions include the prompt and padding columns, which every row stores)."""
    folder = Path(folder)
    log_path = folder / "extraction.json"
    log = json.loads(log_path.read_text()) if log_path.exists() else {}  # shard name -> its entry
    disk = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    timed = [e for e in log.values() if "reused" not in e]  # linked from another cache: no time of this one's
    secs, pos = sum(e["seconds"] for e in timed), sum(e["positions"] for e in timed)
    reused = len(log) - len(timed)
    return {
        "disk_bytes": disk,
        "positions_per_s": round(pos / secs, 1) if secs else None,
        "timed_shards": len(timed),
    } | ({"reused_shards": reused} if reused else {})


class FeatureStore:
    """Random access to cached features by sequence index (memory-mapped shards)."""

    def __init__(
        self,
        path: str | Path,
        tokens: torch.Tensor | None = None,
        layer_ids: list[int] | None = None,
        sequences: int = 0,
    ):
        """``sequences``: only the first N rows are read, so only their shards must exist (train on the part
        of a cache that is extracted while the rest is still being made)."""
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path}: not found (make the cache with `lilicorr data features`)")
        self.meta = json.loads(meta_path.read_text())
        if tokens is not None and data_digest(tokens) != self.meta["data_sha256_16"]:
            raise ValueError(f"{self.path}: features were extracted from other data ({self.meta['data']})")
        if layer_ids is not None and list(layer_ids) != self.meta["layer_ids"]:
            raise ValueError(
                f"{self.path}: layer_ids {self.meta['layer_ids']} cached, the drafter taps {list(layer_ids)}"
            )
        self.length = int(self.meta["length"])
        self.packed = self.meta.get("layout") == "packed"
        self.shard_size = int(self.meta["shard_size"])
        wanted = min(sequences, self.meta["sequences"]) if sequences else self.meta["sequences"]
        n_shards = (wanted + self.shard_size - 1) // self.shard_size
        missing = [i for i in range(n_shards) if not (self.path / f"{i:05d}.safetensors").exists()]
        if missing:
            raise ValueError(f"{self.path}: shards {missing[:5]} missing (extraction unfinished; rerun it to resume)")
        self._handles: dict[int, object] = {}
        self._readers: dict[int, tuple[ShardReader, torch.Tensor]] = {}
        self.fp8 = self.meta.get("dtype") == FP8  # read back as bf16
        self._scales: dict[tuple[int, str], torch.Tensor] = {}

    def _shard(self, si: int):
        if si not in self._handles:
            self._handles[si] = safe_open(str(self.path / f"{si:05d}.safetensors"), framework="pt")
        return self._handles[si]

    def _reader(self, si: int) -> tuple[ShardReader, torch.Tensor]:
        """A packed shard's reader and its row offsets ``[rows + 1]`` (read once). Its rows come by ``pread``
        (``shard_reader``: the memory map read 3× the bytes from disk)."""
        if si not in self._readers:
            reader = ShardReader(self.path / f"{si:05d}.safetensors")
            self._readers[si] = reader, reader.tensor("offsets")
        return self._readers[si]

    def _scale(self, si: int, name: str) -> torch.Tensor:
        if (si, name) not in self._scales:
            self._scales[si, name] = self._reader(si)[0].tensor(f"{name}_scale")
        return self._scales[si, name]

    def get(self, idx: torch.Tensor, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Taps ``[b, L, F·H]`` and final hidden ``[b, L, H]`` of sequences ``idx`` (their first ``length``
        columns only when given: only those are read)."""
        taps, final = [], []
        n = min(length or self.length, self.length)
        for i in idx.tolist():
            si, j = divmod(i, self.shard_size)
            if self.packed:  # the row's own columns, zeros after them (never read by a valid block)
                reader, offsets = self._reader(si)
                start, end = int(offsets[j]), int(offsets[j + 1])
                end = min(end, start + n)
                for name, out in (("taps", taps), ("final", final)):
                    row = reader.rows(name, start, end)
                    if self.fp8:
                        row = dequantize_fp8(row, self._scale(si, name))
                    out.append(torch.nn.functional.pad(row, (0, 0, 0, n - (end - start)))[None])
            else:
                h = self._shard(si)
                taps.append(h.get_slice("taps")[j : j + 1, :n])
                final.append(h.get_slice("final")[j : j + 1, :n])
        return torch.cat(taps), torch.cat(final)
