"""Answer packs: a regenerated data file reduced to the target's answers, small enough to commit.

Why: answering the prompts costs CPU-hours (the data cards in ``data/cards/``: 90–208 minutes a set on two
cores), and a machine that starts from a fresh disk loses them — while most of a data file's bytes are
prompt tokens and padding that the prompts JSONL and the target's tokenizer rebuild exactly. A pack keeps
per row only the answer ids (uint16 where the vocabulary fits), the row's sampled flag, the regeneration
config and the sha256 of the file it came from (``lilicorr data pack``). ``lilicorr data unpack`` rebuilds
the rows with ``regenerate``'s own code and writes the file only when its sha256 is the recorded one: another
prompts file, tokenizer or chat template is named, not silently trained on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from lilicorr.data.atomic import atomic_write, atomic_write_text
from lilicorr.datagen.regenerate import RegenConfig, file_sha, load_regenerated, row_layout, shard_tensors

PACK_KEY = "lilicorr_answer_pack"  # the safetensors metadata entry holding the pack's JSON facts
FORMAT = 1


def pack_answers(data: str | Path, out: str | Path) -> dict:
    """Write the answers of ``data`` (a file of ``lilicorr data regenerate``, with its ``.json`` beside it)
    to ``out``; returns the pack's facts."""
    data, out = Path(data), Path(out)
    meta_path = data.with_suffix(data.suffix + ".json")
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path}: the regeneration record of {data} is missing (pack needs its config)")
    meta = json.loads(meta_path.read_text())
    if "config" not in meta:
        raise ValueError(f"{meta_path}: no 'config' field (expected the record `lilicorr data regenerate` writes)")
    tensors = load_regenerated(data)
    tokens, mask = tensors["tokens"], tensors["loss_mask"].bool()  # [rows, length]
    lengths = mask.sum(1).to(torch.int32)  # [rows] answer tokens per row
    answers = tokens[mask]  # [answer tokens], row after row (a row's answer is one contiguous run)
    dtype = torch.uint16 if answers.numel() == 0 or int(answers.max()) < 2**16 else torch.int32
    cfg = meta["config"]
    facts = {
        "format": FORMAT,
        "source": str(data),
        "source_sha256": file_sha(data),
        "rows": int(tokens.shape[0]),
        "answer_tokens": int(lengths.sum()),
        "config": cfg,
        "prompts_sha256": file_sha(Path(cfg["prompts"])) if cfg.get("prompts") else None,
        "engines": meta.get("engines"),
    }
    packed = {"answers": answers.to(dtype), "lengths": lengths, "sampled": tensors["sampled"].bool()}
    atomic_write(out, lambda p: save_file(packed, str(p), metadata={PACK_KEY: json.dumps(facts)}))
    return {k: v for k, v in facts.items() if k != "config"} | {"out": str(out), "bytes": out.stat().st_size}


def read_pack(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(facts, tensors) of a pack, or a ValueError naming what is wrong with the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: answer pack not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors' own error type: a truncated or foreign file
        raise ValueError(f"{path}: not a safetensors file ({e})") from e
    if PACK_KEY not in meta:
        raise ValueError(f"{path}: not an answer pack (no '{PACK_KEY}' metadata; made by `lilicorr data pack`)")
    tensors = load_file(str(path))
    facts = json.loads(meta[PACK_KEY])
    if facts.get("format") != FORMAT:
        raise ValueError(f"{path}: pack format {facts.get('format')}, this version reads {FORMAT}")
    missing = {"answers", "lengths", "sampled"} - tensors.keys()
    if missing:
        raise ValueError(f"{path}: tensors {sorted(missing)} missing (expected answers, lengths, sampled)")
    if int(tensors["lengths"].sum()) != tensors["answers"].numel():
        raise ValueError(f"{path}: lengths add up to {int(tensors['lengths'].sum())} answer tokens, "
                         f"the file holds {tensors['answers'].numel()}")  # fmt: skip
    return facts, tensors


def unpack_answers(pack: str | Path, target: str, out: str | Path | None = None, prompts: str | None = None) -> dict:
    """Rebuild the data file a pack came from at ``out`` (default: where it was packed from) and its
    ``.json``, with the target's tokenizer from ``target`` and the prompts file of the pack's config (or
    ``prompts``). Nothing is written unless the rebuilt file's sha256 is the recorded one; a file already
    there with that sha256 is kept as it is (``"unpacked": false``), so scripts can call this every time."""
    facts, tensors = read_pack(pack)
    out = Path(out or facts["source"])
    meta_path = out.with_suffix(out.suffix + ".json")
    if out.exists():
        found = file_sha(out)
        if found != facts["source_sha256"]:
            raise ValueError(f"{out}: exists with other data than the pack's (sha256 {found[:16]}, packed "
                             f"{facts['source_sha256'][:16]}); not overwritten — pass another --out")  # fmt: skip
        if meta_path.exists():
            return json.loads(meta_path.read_text()) | {"unpacked": False}
    known = {f.name for f in fields(RegenConfig)}
    cfg = RegenConfig(**{k: v for k, v in facts["config"].items() if k in known})
    cfg = replace(cfg, target=target, out=str(out), prompts=prompts or cfg.prompts)
    if cfg.prompts:
        if not Path(cfg.prompts).exists():
            raise FileNotFoundError(f"{cfg.prompts}: the pack's prompts file is missing (`lilicorr data prompts`)")
        found = file_sha(Path(cfg.prompts))
        if facts.get("prompts_sha256") and found != facts["prompts_sha256"]:
            raise ValueError(f"{cfg.prompts}: sha256 {found[:16]} differs from the pack's "
                             f"prompts file {facts['prompts_sha256'][:16]}")  # fmt: skip
    jobs, length, pad, _ = row_layout(cfg)
    if len(jobs) != facts["rows"]:
        raise ValueError(f"{pack}: {facts['rows']} rows packed, these prompts and tokenizer give {len(jobs)}")
    offsets = [0, *torch.cumsum(tensors["lengths"].long(), 0).tolist()]
    flat = tensors["answers"].long().tolist()
    answers = {j.index: flat[offsets[i] : offsets[i + 1]] for i, j in enumerate(jobs)}
    rebuilt = shard_tensors(jobs, answers, length, pad)  # the keys and order `regenerate` saves (SHARD_KEYS)
    if not torch.equal(rebuilt["sampled"], tensors["sampled"]):
        raise ValueError(f"{pack}: the rows' sampled flags differ from the config's (sampled_fraction)")

    def write(p: Path) -> None:
        save_file(rebuilt, str(p))
        sha = file_sha(p)
        if sha != facts["source_sha256"]:
            raise ValueError(
                f"{out}: the rebuilt file's sha256 {sha[:16]} is not the packed file's "
                f"{facts['source_sha256'][:16]} (other tokenizer or chat template?); not written"
            )

    atomic_write(out, write)
    meta = {
        "config": asdict(cfg),
        "sequences": facts["rows"],
        "length": length,
        "sampled_sequences": int(rebuilt["sampled"].sum()),
        "answer_tokens": facts["answer_tokens"],
        "engines": facts.get("engines"),
        "sha256_16": facts["source_sha256"][:16],
        "note": f"unpacked from {pack} (answers of {facts['source']}); byte-identical to it",
    }
    atomic_write_text(meta_path, json.dumps(meta, indent=2) + "\n")
    return meta | {"unpacked": True}
