"""``lilicorr data``: the corpus, prompt sets, drafter training data and its target features."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lilicorr.cli.common import add_runtime_args


def _corpus(args: argparse.Namespace) -> int:
    from lilicorr.data.corpus import build_corpus

    manifest = build_corpus(Path(args.out))
    print(json.dumps(manifest, indent=2))
    if args.manifest_copy:
        Path(args.manifest_copy).write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


def _regenerate(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from lilicorr.data.corpus import ensure_corpus
    from lilicorr.datagen.regenerate import RegenConfig, regenerate
    from lilicorr.options import from_args

    torch.set_num_threads(args.threads)
    cfg = from_args(RegenConfig, args)
    if cfg.prompts is None:  # corpus windows: the corpus is built on first use, as for bench
        cfg = dataclasses.replace(cfg, corpus=str(ensure_corpus(Path(cfg.corpus))))
    try:
        print(json.dumps(regenerate(cfg), indent=2))
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # whole shards written so far are kept
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _features(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.features.cache import extract_features
    from lilicorr.models.draft import default_layer_ids_for
    from lilicorr.runtime.runtime import resolve_device

    torch.set_num_threads(args.threads)
    cfg = json.loads((Path(args.target) / "config.json").read_text())
    layers = (
        [int(x) for x in args.target_layer_ids.split(",")]
        if args.target_layer_ids
        else default_layer_ids_for(cfg.get("num_hidden_layers") or cfg["text_config"]["num_hidden_layers"])
    )
    try:
        meta = extract_features(
            args.target,
            args.data,
            args.out,
            layers,
            args.batch_size,
            dtype=args.dtype,
            device=resolve_device(args.device),
            max_sequences=args.max_sequences,
            reuse=args.reuse,
            compute_dtype=args.compute_dtype,
        )
    except (OSError, ValueError) as e:  # a full disk ahead, a cache made for other data: named, nothing written
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=2))
    return 0


def _merge(args: argparse.Namespace) -> int:
    from lilicorr.datagen.merge import merge_data

    try:
        meta = merge_data(args.inputs, args.out, args.rows, args.held_out, args.held_out_rows)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in meta.items() if k != "inputs"}))
    return 0


def _pack(args: argparse.Namespace) -> int:
    from lilicorr.datagen.answer_pack import pack_answers

    try:
        print(json.dumps(pack_answers(args.data, args.out), indent=2))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _unpack(args: argparse.Namespace) -> int:
    from lilicorr.data.corpus import ensure_corpus
    from lilicorr.datagen.answer_pack import read_pack, unpack_answers

    try:
        facts, _ = read_pack(args.pack)
        if not facts["config"].get("prompts"):  # corpus windows: the corpus is built on first use
            ensure_corpus(Path(facts["config"]["corpus"]))
        meta = unpack_answers(args.pack, args.target, args.out, args.prompts)
    except (FileNotFoundError, ValueError) as e:  # nothing written
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in meta.items() if k != "config"}, indent=2))
    return 0


def _count_or_all(text: str) -> int | str:
    if text == "all" or text.isdigit():
        return text if text == "all" else int(text)
    raise argparse.ArgumentTypeError(f"expected a count of tokens >= 0 or 'all', found {text!r}")


def _draft_vocab(args: argparse.Namespace) -> int:
    """Count tokens in the given data and write the drafter folder's ``draft_vocab.json``."""
    from transformers import AutoConfig, AutoTokenizer

    from lilicorr.data.chat import ChatError, row_ids
    from lilicorr.data.prompt_sets import read_prompt_rows
    from lilicorr.datagen.regenerate import load_regenerated
    from lilicorr.decoding.draft_vocab import token_frequency_order, write_draft_vocab

    out = Path(args.out)
    if not (out / "config.json").exists():
        print(f"error: {out}: not a drafter folder (no config.json)", file=sys.stderr)
        return 2
    try:
        vocab_size = AutoConfig.from_pretrained(args.target).vocab_size
        tok = AutoTokenizer.from_pretrained(args.target)
        rows: list[list[int]] = []
        for f in args.data:
            if f.endswith(".safetensors"):  # regenerated training data: the answer tokens (under loss_mask)
                d = load_regenerated(f)
                rows += [t[m.bool()].tolist() for t, m in zip(d["tokens"], d["loss_mask"], strict=True)]
            else:  # a prompts JSONL: each row's chat-templated tokens, and its reference answer where it has one
                for r in read_prompt_rows(Path(f)):
                    rows.append(row_ids(tok, r))
                    if isinstance(r.get("answer"), str):
                        rows.append(tok.encode(r["answer"], add_special_tokens=False))
        order, counted = token_frequency_order(rows, vocab_size)
    except (FileNotFoundError, ValueError, ChatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    source = {"data": list(args.data), "target": args.target, "rows": len(rows), "tokens_counted": counted}
    try:
        kept = order[: args.keep]
        default = len(kept) if args.default_size == "all" else args.default_size
        path = write_draft_vocab(out, kept, source, default_size=default)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"written": str(path), "token_ids": min(len(order), args.keep), **source}))
    return 0


def _prompts(args: argparse.Namespace) -> int:
    from lilicorr.data.prompt_sets import load_set, write_prompt_rows

    try:
        rows = load_set(args.set, corpus=Path(args.corpus))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.limit:
        rows = rows[: args.limit]
    write_prompt_rows(Path(args.out), rows)
    cats: dict[str, int] = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    print(json.dumps({"set": args.set, "rows": len(rows), "out": args.out, "categories": cats}))
    return 0


def register(sub) -> None:
    from lilicorr.data.prompt_sets import SETS
    from lilicorr.datagen.regenerate import ROW_KINDS, RegenConfig
    from lilicorr.options import add_options

    data = sub.add_parser("data", help="build datasets").add_subparsers(dest="data_cmd", required=True)
    s = data.add_parser("corpus", help="build the offline corpus (stdlib code + Debian docs)")
    s.add_argument("--out", default="data/corpus")
    s.add_argument("--manifest-copy", default=None, help="also write the manifest here (committed)")
    s.set_defaults(func=_corpus)

    s = data.add_parser("regenerate", help="drafter training data: prompts answered by the target (or fixed answers)")
    add_options(s, RegenConfig)
    s.set_defaults(func=_regenerate)

    s = data.add_parser("prompts", help="write a real prompt set as chat rows {id, category, messages}")
    s.add_argument("set", choices=list(SETS))
    s.add_argument("--out", required=True)
    s.add_argument("--limit", type=int, default=0, help="first N rows only (0: all)")
    s.add_argument("--corpus", default="data/corpus", help="code-functions: the corpus folder (`data corpus`)")
    s.set_defaults(func=_prompts)

    s = data.add_parser("merge", help="one training file from data files and shard folders (rows in order)")
    s.add_argument("inputs", nargs="+", help="data files of `data regenerate`, or shard folders (finished shards)")
    s.add_argument("--out", required=True)
    s.add_argument("--rows", default="all", choices=ROW_KINDS, help="keep only these rows (default: all)")
    s.add_argument("--held-out", help="drop rows whose prompt starts with a prompt of this file's first rows "
                   "(the validation rows of `train draft --val-data`: other answers, later turns)")  # fmt: skip
    s.add_argument("--held-out-rows", type=int, default=64, help="how many first rows of --held-out (default 64)")
    s.set_defaults(func=_merge)

    s = data.add_parser("pack", help="a regenerated data file's answers alone (small enough to commit)")
    s.add_argument("data", help="a file of `data regenerate` (its .json record beside it)")
    s.add_argument("--out", required=True, help="the pack (.safetensors), e.g. data/packs/NAME.answers.safetensors")
    s.set_defaults(func=_pack)

    s = data.add_parser("unpack", help="rebuild a packed data file, byte for byte (sha256-checked)")
    s.add_argument("pack", help="a file of `data pack`")
    s.add_argument("--target", required=True, help="the target folder (its tokenizer and chat template)")
    s.add_argument("--out", default=None, help="the data file to write (default: the path it was packed from)")
    s.add_argument("--prompts", default=None, help="the prompts JSONL (default: the pack's own path)")
    s.set_defaults(func=_unpack)

    s = data.add_parser(
        "draft-vocab",
        help="a drafter's inference vocabulary: its most frequent tokens in the given data, into "
        "DRAFT_DIR/draft_vocab.json (used with --draft-vocab-size / 'draft_vocab_size')",
    )
    s.add_argument("--target", required=True, help="the target folder (tokenizer and vocabulary size)")
    s.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="regenerated data (.safetensors: its answer tokens) or prompts (.jsonl: prompt and 'answer' tokens)",
    )
    s.add_argument("--out", required=True, help="the drafter folder to write draft_vocab.json into")
    s.add_argument("--keep", type=int, default=16384, help="most frequent ids kept in the file (default 16384)")
    s.add_argument(
        "--default-size",
        type=_count_or_all,
        default=0,
        help="the folder's default configuration drafts from this many of the ids ('all': every id kept; 0: the "
        "whole vocabulary unless asked) — for a target whose LM head dwarfs the drafter, e.g. Gemma 3",
    )
    s.set_defaults(func=_draft_vocab)

    s = data.add_parser("features", help="cache the target's tapped hidden states for drafter training")
    s.add_argument("--target", required=True)
    s.add_argument("--data", required=True, help="file made by `lilicorr data regenerate`")
    s.add_argument("--out", required=True, help="cache folder (shards; resumable)")
    s.add_argument("--target-layer-ids", default=None, help="comma-separated (default: the trainer's default)")
    s.add_argument("--batch-size", type=int, default=4)
    s.add_argument(
        "--max-sequences", type=int, default=0, help="only the shards covering the first N rows (0: all); extendable"
    )
    s.add_argument(
        "--reuse",
        default=None,
        help="another feature cache: its shards holding exactly these rows (a merge's first part) are hard-linked",
    )
    # the storage dtype; float8_e4m3fn stores 1 byte a value with per-channel scales
    add_runtime_args(s, dtype="bfloat16", dtypes=("float32", "bfloat16", "float8_e4m3fn"))
    s.add_argument(
        "--compute-dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="what the target runs in (auto: bf16 where this CPU multiplies it natively, else fp32; stored as --dtype)",
    )
    s.set_defaults(func=_features)
