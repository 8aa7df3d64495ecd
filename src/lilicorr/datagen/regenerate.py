"""Drafter training data: prompts answered by the target itself (``lilicorr data regenerate``).

A drafter is judged by how often it predicts *the target's* next tokens, so it learns from the
target's own continuations, not from the corpus text. Half the sequences are continued greedily
and half by sampling at T = 1 (recorded per sequence), which covers both serving regimes.

Two prompt sources: fixed-length windows of the corpus (raw continuation: code and prose documents, or
one category with ``--categories``), or a prompts JSONL (``--prompts``, e.g. ShareGPT) whose answers stop at
EOS, as in serving. A chat model's rows get its chat template; a base model (no chat template, e.g. Gemma 3
270M; ``--text-format raw`` forces it) continues each row's *text*: its ``prompt``, or its first user turn as
plain text (``raw_text``), after the tokenizer's ``<bos>`` where it adds one — the layout it is served with
(``data.chat.text_ids``). Prompt rows have different lengths: each row is stored right-padded to
``max_prompt_tokens + new_tokens`` with ``loss_mask`` on the answer only, which a causal target and the
anchor sampler both handle without an attention mask.

Who answers is ``--engine`` (``datagen/answerers.py``: native, llamacpp, vllm, or fixed = the
dataset's own answers). Work is saved in shards of ``shard_size`` rows — shard i always holds rows
i·S … (i+1)·S − 1 — with a manifest (``manifest.json``: per shard its rows, answer tokens, sha256,
engine and wall time), so an interrupted run resumes where it stopped, on any engine, in a later
session, and a run with fewer sequences reuses the first shards of a bigger one.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from lilicorr.data.atomic import atomic_write, atomic_write_text
from lilicorr.data.corpus import read_split
from lilicorr.datagen.answerers import ENGINES, Job, make_answerer, resolve_engine
from lilicorr.datagen.data_card import data_card, write_data_card
from lilicorr.datagen.raw_text import TEXT_FORMATS, raw_text, text_format
from lilicorr.options import command_line, option
from lilicorr.runtime.folder import folder_tokenizer_and_eos

SHARD_KEYS = ("tokens", "loss_mask", "sampled")


@dataclass
class RegenConfig:
    target: str = option(help="target folder (Hugging Face)")
    out: str = option(help="output .safetensors (shards beside it make the run resumable)")
    corpus: str = option("data/corpus", "corpus folder (prompt windows when --prompts is not given)")
    num_sequences: int = option(2048, "rows to make (chat: the first N prompts that fit)")
    prompt_tokens: int = option(64, "corpus windows: prompt length")
    new_tokens: int = option(192, "answer tokens at most")
    shard_size: int = option(32, "rows per shard (shard i holds rows i·S … (i+1)·S−1)")
    concurrency: int = option(32, "rows in flight (continuous batching; llama.cpp slots; vLLM max_num_seqs)")
    sampled_fraction: float = option(0.5, "share of rows sampled at T=1 (spread evenly; the rest greedy)")
    seed: int = option(0, "per-row seeds derive from it")
    split: str = option("train", "corpus split for prompt windows")
    prompts: str | None = option(None, "prompts JSONL (chat rows, e.g. from `data prompts sharegpt`)")
    max_prompt_tokens: int = option(256, "prompt rows: skip longer (templated) prompts")
    skip_prompts: int = option(0, "prompt rows: start after the first N prompts that fit (the rows an earlier "
                               "run made with --num-sequences N), so a new file continues the set")  # fmt: skip
    text_format: str = option("auto", "prompt rows as: chat (the target's template) | raw (the row's text, "
                              "continued) | auto (raw for a target without a chat template)",
                              choices=TEXT_FORMATS)  # fmt: skip
    categories: str = option("code,prose", "corpus windows: document categories, taken in turn")
    engine: str = option("auto", "who answers: auto (vllm where `make compat` built it, else native) | native | "
                         "llamacpp | vllm | fixed (the rows' own 'answer')", choices=ENGINES)  # fmt: skip
    gguf: str | None = option(None, "llamacpp: the target GGUF (default: TARGET.gguf)")
    dtype: str = option("float32", "target weights while generating (native, vllm)", choices=("float32", "bfloat16"))
    device: str = option("cpu", "native: where the target runs (auto: CUDA when available)",
                         choices=("auto", "cpu", "cuda"))  # fmt: skip
    threads: int = option(2, "CPU threads")
    shards: str | None = option(None, "shard folder (default: OUT.shards); shared by runs of any size")
    card: str | None = option(None, "also write DATA_CARD.md into this folder (e.g. data/cards/NAME, committed)")


def _chat_rows(cfg: RegenConfig, tokenizer, eos: frozenset[int]) -> list[tuple[list[int], list[int] | None]]:
    """(prompt ids, reference answer or None) of the JSONL rows in file order — templated, or raw text — skipping
    prompts over ``max_prompt_tokens``. The reference is the row's ``answer`` text + EOS, for engine ``fixed``,
    which skips the rows that have none (a conversation's last turn) and names the field if none has one."""
    from lilicorr.data.chat import row_ids, text_ids
    from lilicorr.data.prompt_sets import read_prompt_rows

    raw = text_format(cfg, tokenizer) == "raw"

    fixed = cfg.engine == "fixed"
    out = []
    skip = cfg.skip_prompts
    for row in read_prompt_rows(Path(cfg.prompts)):
        has_answer = isinstance(row.get("answer"), str)
        if fixed and not has_answer:
            continue
        ids = text_ids(tokenizer, raw_text(row)) if raw else row_ids(tokenizer, row, chat=True)
        if len(ids) > cfg.max_prompt_tokens:
            continue
        if skip:  # one that fits, made by the earlier run
            skip -= 1
            continue
        ref = tokenizer.encode(row["answer"], add_special_tokens=False) + [min(eos)] if has_answer else None
        out.append((ids, ref))
        if len(out) >= cfg.num_sequences:
            break
    if fixed and not out:
        raise ValueError(f"{cfg.prompts}: no row has an 'answer' field (engine 'fixed' trains on the rows' answers)")
    return out


def _windows(cfg: RegenConfig, tokenizer) -> list[tuple[list[int], list[int] | None]]:
    """Deterministic prompt windows from the corpus split, the ``categories`` in turn (code and prose by default).
    A tokenizer that starts text with ``<bos>`` (Gemma) gets it first and one token less of the document: the
    model never saw text without it, and the row length stays ``prompt_tokens + new_tokens``."""
    from lilicorr.data.chat import adds_bos

    cats = tuple(c.strip() for c in cfg.categories.split(",") if c.strip())
    docs = read_split(Path(cfg.corpus), cfg.split)
    by_cat = {c: [d for d in docs if d.category == c] for c in cats}
    empty = [c for c in cats if not by_cat[c]]
    if not cats or empty:
        raise ValueError(f"--categories {cfg.categories!r}: no {cfg.split} documents of {empty or 'any category'}")
    bos = [tokenizer.bos_token_id] if adds_bos(tokenizer) else []
    n = cfg.prompt_tokens - len(bos)  # document tokens of a window
    g = torch.Generator().manual_seed(cfg.seed)
    out: list[tuple[list[int], list[int] | None]] = []
    cache: dict[str, list[int]] = {}
    while len(out) < cfg.num_sequences:
        cat = cats[len(out) % len(cats)]
        doc = by_cat[cat][int(torch.randint(len(by_cat[cat]), (1,), generator=g))]
        if doc.id not in cache:
            cache[doc.id] = tokenizer.encode(doc.text, add_special_tokens=False)
        ids = cache[doc.id]
        if len(ids) <= n:
            continue
        start = int(torch.randint(len(ids) - n, (1,), generator=g))
        out.append((bos + ids[start : start + n], None))
    return out


ROW_KINDS = ("all", "greedy", "sampled")  # which rows of a data file: every one, or T=0 / T=1 answers only


def rows_of_kind(sampled: torch.Tensor, kind: str) -> torch.Tensor:
    """``[rows]`` bool: the rows of ``kind`` given each row's ``sampled`` flag (one rule for merge and training)."""
    if kind not in ROW_KINDS:
        raise ValueError(f"rows {kind!r}: expected one of {list(ROW_KINDS)}")
    sampled = sampled.bool()
    return torch.ones_like(sampled) if kind == "all" else sampled if kind == "sampled" else ~sampled


def is_sampled(i: int, fraction: float) -> bool:
    """Row ``i`` is sampled at T=1: spread evenly (every other row at 0.5), so any slice mixes both regimes."""
    return math.floor((i + 1) * fraction) > math.floor(i * fraction)


def _jobs(cfg: RegenConfig, rows) -> list[Job]:
    return [
        Job(
            index=i,
            prompt_ids=ids,
            temperature=1.0 if is_sampled(i, cfg.sampled_fraction) and cfg.engine != "fixed" else 0.0,
            seed=cfg.seed * 1_000_003 + i,
            max_tokens=cfg.new_tokens,
            reference=ref,
        )
        for i, (ids, ref) in enumerate(rows)
    ]


def shard_tensors(jobs: list[Job], answers: dict[int, list[int]], length: int, pad: int) -> dict[str, torch.Tensor]:
    """The stored rows of ``jobs``: prompt + answer, right-padded to ``length``, ``loss_mask`` on the answer."""
    tokens = torch.full((len(jobs), length), pad, dtype=torch.int32)  # [rows, length], right-padded
    mask = torch.zeros(len(jobs), length, dtype=torch.bool)  # [rows, length], True on answer tokens
    for r, job in enumerate(jobs):
        seq = (job.prompt_ids + answers[job.index])[:length]
        tokens[r, : len(seq)] = torch.tensor(seq, dtype=torch.int32)
        mask[r, len(job.prompt_ids) : len(seq)] = True
    return {"tokens": tokens, "loss_mask": mask, "sampled": torch.tensor([j.temperature > 0 for j in jobs])}


def file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Manifest:
    """``manifest.json`` of a shard folder: the layout every shard must share, and per shard its facts."""

    def __init__(self, shard_dir: Path, layout: dict):
        self.path = shard_dir / "manifest.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {"layout": layout, "shards": {}}
        if self.data["layout"] != layout:
            raise ValueError(
                f"{self.path}: shards were made with layout {self.data['layout']}, this run has {layout}; "
                "use another --shards folder"
            )

    def add(self, name: str, info: dict) -> None:
        self.data["shards"][name] = info
        atomic_write_text(self.path, json.dumps(self.data, indent=1) + "\n")


def row_layout(cfg: RegenConfig) -> tuple[list[Job], int, int, frozenset[int]]:
    """The rows a config makes — (jobs, row length, pad id, EOS ids that end an answer) — from its prompts
    (or corpus windows) and the target's tokenizer: one rule for ``regenerate`` and ``unpack_answers``."""
    if cfg.skip_prompts < 0:
        raise ValueError(f"--skip-prompts {cfg.skip_prompts}: expected a count ≥ 0")
    if cfg.skip_prompts and cfg.prompts is None:
        raise ValueError(f"--skip-prompts {cfg.skip_prompts} counts --prompts rows: no --prompts given")
    tokenizer, eos = folder_tokenizer_and_eos(cfg.target)
    pad = min(eos) if eos else 0
    chat = cfg.prompts is not None
    rows = _chat_rows(cfg, tokenizer, eos) if chat else _windows(cfg, tokenizer)
    if not chat:  # raw continuation: the tiny targets' data runs to the length limit, EOS or not
        eos = frozenset()
    length = (cfg.max_prompt_tokens if chat else cfg.prompt_tokens) + cfg.new_tokens
    return _jobs(cfg, rows), length, pad, eos


def regenerate(cfg: RegenConfig) -> dict:
    """Write ``out`` (safetensors: tokens, loss_mask, sampled), ``out.json`` (provenance) and the manifest."""
    # the manifest and card name the engine that ran and the prompt format the target got
    tokenizer, _ = folder_tokenizer_and_eos(cfg.target)
    cfg = replace(cfg, engine=resolve_engine(cfg.engine), text_format=text_format(cfg, tokenizer))
    out = Path(cfg.out)
    shard_dir = Path(cfg.shards) if cfg.shards else out.with_name(out.name + ".shards")
    shard_dir.mkdir(parents=True, exist_ok=True)
    jobs, length, pad, eos = row_layout(cfg)
    layout = {"prompts": cfg.prompts, "length": length, "shard_size": cfg.shard_size, "seed": cfg.seed,
              "sampled_fraction": cfg.sampled_fraction, "new_tokens": cfg.new_tokens}  # fmt: skip
    # raw rows never share shards with templated ones; chat layouts keep their old keys (old folders resume)
    if cfg.prompts and cfg.text_format == "raw":
        layout["text_format"] = "raw"
    if cfg.categories != "code,prose" and not cfg.prompts:
        layout["categories"] = cfg.categories
    if cfg.skip_prompts and cfg.prompts:  # other rows: never the same shards as a run from the first prompt
        layout["skip_prompts"] = cfg.skip_prompts
    manifest = Manifest(shard_dir, layout)
    S = cfg.shard_size
    n_shards = (len(jobs) + S - 1) // S
    for si in range(n_shards):  # shards from before the manifest existed: their facts, engine unknown
        path = shard_dir / f"{si:05d}.safetensors"
        if path.exists() and path.stem not in manifest.data["shards"]:
            facts = shard_facts(load_file(str(path)), eos)
            manifest.add(path.stem, {**facts, "sha256": file_sha(path), "engine": "unrecorded", "dtype": None,
                                     "seconds": 0.0})  # fmt: skip
    command = command_line("lilicorr data regenerate", RegenConfig, asdict(cfg))

    def card(merged: dict | None = None) -> None:
        text = data_card(asdict(cfg), manifest.data, command, len(jobs), merged)
        atomic_write_text(out.with_suffix(".DATA_CARD.md"), text)  # beside the data, named for it
        if cfg.card:
            write_data_card(cfg.card, text)

    todo = [si for si in range(n_shards) if not (shard_dir / f"{si:05d}.safetensors").exists()]
    if todo:
        answerer = make_answerer(cfg.engine, cfg, eos)  # cfg.engine resolved at the top
        try:
            _answer_shards(cfg, answerer, jobs, todo, shard_dir, manifest, length, pad, eos, on_shard=card)
        finally:
            answerer.close()
    parts = [load_file(str(shard_dir / f"{si:05d}.safetensors")) for si in range(n_shards)]
    merged = {k: torch.cat([p[k] for p in parts])[: len(jobs)] for k in SHARD_KEYS}
    atomic_write(out, lambda p: save_file(merged, str(p)))
    engines = sorted({manifest.data["shards"].get(f"{si:05d}", {}).get("engine", "?") for si in range(n_shards)})
    meta = {
        "config": asdict(cfg),
        "sequences": int(merged["tokens"].shape[0]),
        "length": length,
        "sampled_sequences": int(merged["sampled"].sum()),
        "answer_tokens": int(merged["loss_mask"].sum()),
        "engines": engines,
        "sha256_16": file_sha(out)[:16],
        "note": "rows with sampled=1 were continued at T=1 (seeded per row, except on vllm), the rest greedily",
    }
    atomic_write_text(out.with_suffix(out.suffix + ".json"), json.dumps(meta, indent=2) + "\n")
    card(meta)
    return meta


def shard_facts(tensors: dict[str, torch.Tensor], eos: frozenset[int]) -> dict:
    """A shard's rows, answer tokens, sampled rows and rows whose answer ends at an EOS id."""
    mask = tensors["loss_mask"]  # [rows, length]
    last = (mask.cumsum(1) == mask.sum(1, keepdim=True)) & mask  # each row's last answer column
    ends = tensors["tokens"][last].tolist()
    return {
        "rows": len(mask),
        "answer_tokens": int(mask.sum()),
        "sampled_rows": int(tensors["sampled"].sum()),
        "eos_rows": sum(int(t) in eos for t in ends),
    }


def _answer_shards(cfg, answerer, jobs, todo, shard_dir: Path, manifest: Manifest, length: int, pad: int,
                   eos: frozenset[int], on_shard) -> None:  # fmt: skip
    """Answer the rows of the ``todo`` shards; write each shard (atomically) as soon as all its rows are in,
    record it in the manifest and call ``on_shard()`` (the data card follows the run)."""
    S = cfg.shard_size
    wanted = [j for si in todo for j in jobs[si * S : (si + 1) * S]]
    answers: dict[int, list[int]] = {}
    waiting = {si: set(range(si * S, min(len(jobs), (si + 1) * S))) for si in todo}
    t_last = time.time()
    bar = tqdm(total=len(wanted), desc=f"regenerate ({cfg.engine})", mininterval=5)
    for job, ids in answerer.answer(wanted):
        answers[job.index] = ids
        bar.update(1)
        si = job.index // S
        waiting[si].discard(job.index)
        if waiting[si]:
            continue
        del waiting[si]
        shard_jobs = jobs[si * S : (si + 1) * S]
        tensors = shard_tensors(shard_jobs, answers, length, pad)
        path = shard_dir / f"{si:05d}.safetensors"
        atomic_write(path, lambda p, t=tensors: save_file(t, str(p)))
        now = time.time()
        manifest.add(
            path.stem,
            {
                **shard_facts(tensors, eos),
                "sha256": file_sha(path),
                "engine": cfg.engine,
                "dtype": cfg.dtype if cfg.engine in ("native", "vllm") else None,
                "seconds": round(now - t_last, 2),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            },
        )
        t_last = now
        for j in shard_jobs:
            answers.pop(j.index, None)
        on_shard()
    bar.close()


def load_regenerated(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: training data not found (make it with `lilicorr data regenerate`)")
    data = load_file(str(path))
    for key in ("tokens", "loss_mask"):
        if key not in data:
            raise ValueError(f"{path}: tensor '{key}' missing (expected tokens, loss_mask, sampled)")
    return data
