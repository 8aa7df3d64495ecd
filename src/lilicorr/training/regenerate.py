"""Drafter training data: prompts answered by the target itself (``lilicorr data regenerate``).

A drafter is judged by how often it predicts *the target's* next tokens, so it learns from the
target's own continuations, not from the corpus text. Half the sequences are continued greedily
and half by sampling at T = 1 (recorded per sequence), which covers both serving regimes. Work is
saved in shards, so an interrupted run resumes where it stopped.

Two prompt sources: fixed-length windows of the corpus (raw continuation, for the tiny targets),
or a prompts JSONL (``--prompts``, e.g. ShareGPT) whose rows get the target's chat template and
whose answers stop at EOS, as in serving. Chat rows have different lengths: each row is stored
right-padded to ``max_prompt_tokens + new_tokens`` with ``loss_mask`` on the answer only, which
a causal target and the anchor sampler both handle without an attention mask.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from lilicorr.data.atomic import atomic_write, atomic_write_text
from lilicorr.data.corpus import read_split
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.target.runtime import TargetRuntime


@dataclass
class RegenConfig:
    target: str
    corpus: str
    out: str
    num_sequences: int = 2048
    prompt_tokens: int = 64
    new_tokens: int = 192
    batch_size: int = 32
    sampled_fraction: float = 0.5
    seed: int = 0
    split: str = "train"
    prompts: str | None = None  # prompts JSONL (chat rows); None: corpus windows
    max_prompt_tokens: int = 256  # chat rows with a longer templated prompt are skipped
    dtype: str = "float32"  # target weights while generating (bf16 is faster on AMX CPUs and GPUs)
    device: str = "cpu"  # where the target runs (auto: CUDA when available)
    shards: str | None = None  # shard folder (default: OUT.shards); batch i always holds prompts i·B..(i+1)·B−1,
    # so a run with fewer sequences reuses the first shards of a bigger one


def _chat_prompts(cfg: RegenConfig, tokenizer) -> list[list[int]]:
    """Templated prompts of the JSONL rows in file order, skipping those over ``max_prompt_tokens``."""
    from lilicorr.data.chat import row_ids
    from lilicorr.data.prompt_sets import read_prompt_rows

    out = []
    for row in read_prompt_rows(Path(cfg.prompts)):
        ids = row_ids(tokenizer, row, chat=True)
        if len(ids) <= cfg.max_prompt_tokens:
            out.append(ids)
        if len(out) >= cfg.num_sequences:
            break
    return out


def _prompts(cfg: RegenConfig, tokenizer) -> list[list[int]]:
    """Deterministic prompt windows from the corpus split, alternating code and prose documents."""
    docs = read_split(Path(cfg.corpus), cfg.split)
    by_cat = {c: [d for d in docs if d.category == c] for c in ("code", "prose")}
    g = torch.Generator().manual_seed(cfg.seed)
    out: list[list[int]] = []
    cache: dict[str, list[int]] = {}
    while len(out) < cfg.num_sequences:
        cat = ("code", "prose")[len(out) % 2]
        doc = by_cat[cat][int(torch.randint(len(by_cat[cat]), (1,), generator=g))]
        if doc.id not in cache:
            cache[doc.id] = tokenizer.encode(doc.text, add_special_tokens=False)
        ids = cache[doc.id]
        if len(ids) <= cfg.prompt_tokens:
            continue
        start = int(torch.randint(len(ids) - cfg.prompt_tokens, (1,), generator=g))
        out.append(ids[start : start + cfg.prompt_tokens])
    return out


def regenerate(cfg: RegenConfig) -> dict:
    """Write ``out`` (safetensors: tokens, loss_mask, sampled) and ``out.json`` (provenance)."""
    out = Path(cfg.out)
    shard_dir = Path(cfg.shards) if cfg.shards else out.with_name(out.name + ".shards")
    shard_dir.mkdir(parents=True, exist_ok=True)
    target = TargetRuntime.load(cfg.target, dtype=getattr(torch, cfg.dtype), device=cfg.device)
    chat = cfg.prompts is not None
    prompts = _chat_prompts(cfg, target.tokenizer) if chat else _prompts(cfg, target.tokenizer)
    n_batches = (len(prompts) + cfg.batch_size - 1) // cfg.batch_size
    engine = SpecEngine(target)
    length = (cfg.max_prompt_tokens if chat else cfg.prompt_tokens) + cfg.new_tokens
    eos = frozenset(target.eos_token_ids)
    pad = min(eos) if eos else 0
    for bi in tqdm(range(n_batches), desc="regenerate", mininterval=5):
        shard = shard_dir / f"{bi:05d}.safetensors"
        if shard.exists():
            continue
        rows = range(bi * cfg.batch_size, min(len(prompts), (bi + 1) * cfg.batch_size))
        # Spread sampled rows evenly (e.g. every other row at 0.5), so any slice — the validation
        # rows too — mixes both regimes.
        sampled = [math.floor((i + 1) * cfg.sampled_fraction) > math.floor(i * cfg.sampled_fraction) for i in rows]
        reqs = [
            Request(
                prompts[i],
                SamplingParams(
                    max_tokens=cfg.new_tokens,
                    ignore_eos=not chat,  # chat answers end at EOS, as when served
                    temperature=1.0 if s else 0.0,
                    seed=cfg.seed * 1_000_003 + i,
                ),
                eos_ids=eos,
            )
            for i, s in zip(rows, sampled, strict=True)
        ]
        engine.generate(reqs)
        tokens = torch.full((len(reqs), length), pad, dtype=torch.int32)  # [b, length], right-padded
        mask = torch.zeros(len(reqs), length, dtype=torch.bool)
        for j, r in enumerate(reqs):
            seq = (r.prompt_ids + r.output_ids)[:length]
            tokens[j, : len(seq)] = torch.tensor(seq, dtype=torch.int32)
            mask[j, len(r.prompt_ids) : len(seq)] = True
        tensors = {"tokens": tokens, "loss_mask": mask, "sampled": torch.tensor(sampled)}
        atomic_write(shard, lambda p, t=tensors: save_file(t, str(p)))
    parts = [load_file(str(shard_dir / f"{bi:05d}.safetensors")) for bi in range(n_batches)]
    merged = {k: torch.cat([p[k] for p in parts])[: len(prompts)] for k in ("tokens", "loss_mask", "sampled")}
    atomic_write(out, lambda p: save_file(merged, str(p)))
    digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
    meta = {
        "config": asdict(cfg),
        "sequences": int(merged["tokens"].shape[0]),
        "length": length,
        "sampled_sequences": int(merged["sampled"].sum()),
        "answer_tokens": int(merged["loss_mask"].sum()),
        "sha256_16": digest,
        "note": "rows with sampled=1 were continued at T=1 (seeded per row), the rest greedily",
    }
    atomic_write_text(out.with_suffix(out.suffix + ".json"), json.dumps(meta, indent=2) + "\n")
    return meta


def load_regenerated(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: training data not found (make it with `lilicorr data regenerate`)")
    data = load_file(str(path))
    for key in ("tokens", "loss_mask"):
        if key not in data:
            raise ValueError(f"{path}: tensor '{key}' missing (expected tokens, loss_mask, sampled)")
    return data
