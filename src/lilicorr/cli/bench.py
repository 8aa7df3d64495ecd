"""``lilicorr bench`` (proposal methods side by side on one stack) and ``lilicorr report`` (its results page)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from lilicorr.cli.common import add_runtime_args
from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_DRAFT, SHIPPED_TARGET

QUICK = {
    "num_prompts": 4,
    "max_new_tokens": 32,
    "temperatures": [0.0],
    "long_prompts": 0,
    "sweep_concurrency": [1, 2],
    "sweep_input_lens": [32],
    "sweep_max_tokens": 16,
}


def _bench(args: argparse.Namespace) -> int:
    import torch

    from lilicorr.bench.runner import markdown_table, run_bench
    from lilicorr.bench.variants import bench_prompts, choose_variants

    torch.set_num_threads(args.threads)
    if args.quick:
        vars(args).update(QUICK)
    if args.draft is None and args.target == SHIPPED_TARGET:  # a bare `lilicorr bench`: the shipped pair
        args.draft = [d for d in (SHIPPED_DFLASH, SHIPPED_DRAFT) if (Path(d) / "config.json").exists()]
    try:
        prompts = bench_prompts(
            args.target,
            args.prompts,
            args.num_prompts,
            args.chat,
            args.corpus,
            args.prompt_tokens,
            args.long_prompts,
            args.long_tokens,
        )
        variants = choose_variants(
            args.draft or [],
            args.num_speculative_tokens,
            args.tree_budgets,
            args.only,
            args.sweep_arms,
            draft_vocabs=args.draft_vocab_sizes,
            gate=args.with_draft_gate,
        )
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sweep = {
        "concurrencies": args.sweep_concurrency,
        "input_lens": args.sweep_input_lens,
        "max_tokens": args.sweep_max_tokens,
        "arms": args.sweep_arms,
        "pooled": args.sweep_pooled,
    }
    results = run_bench(
        args.target,
        args.draft or [],
        prompts,
        args.temperatures,
        args.max_new_tokens,
        out=Path(args.out),
        seed=args.seed,
        arms=variants,
        dtype=args.dtype,
        device=args.device,
        paired_ar=args.paired_ar,
        sweep=None if args.no_sweep else sweep,
    )
    print(markdown_table(results))
    print(f"wrote {Path(args.out) / 'results.json'} and results.md")
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.curves:
        from lilicorr.training.curves import curves_table, plot_curves

        try:
            png = plot_curves(args.curves, args.out)
            table = curves_table(args.curves)
            print(f"wrote {png}\n{table}")
            if args.table:  # the page's generated part: table and plot
                notes = Path(args.notes).read_text() if args.notes else ""
                Path(args.table).write_text(
                    f"# {args.title}\n\n{table}\n![learning curves]({Path(png).name})\n\n{notes}"
                )
                print(f"wrote {args.table}")
        except (FileNotFoundError, KeyError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if not args.results:
        print("error: give a bench results.json, or --curves RUN... for learning curves", file=sys.stderr)
        return 2
    from lilicorr.bench.report import write_report

    path = write_report(Path(args.results), Path(args.out), args.command, args.title, args.baseline, args.notes)
    print(f"wrote {path}")
    return 0


def _bench_serve(args: argparse.Namespace) -> int:
    from lilicorr.bench.serve import ServeArm, ServeBenchConfig, run_serve_bench
    from lilicorr.bench.serve_page import write_serve_page
    from lilicorr.runtime.llama_server import LLAMA_SERVER

    arms = [ServeArm("plain")]
    for d in args.draft or []:
        spec = {"model": d}
        arms.append(ServeArm(Path(d).name, spec))
        if args.fixed:
            arms.append(ServeArm(Path(d).name + "+fixed", spec, load_policy=False))
    for item in args.spec or []:
        name, _, text = item.partition("=")
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            print(f"error: --spec {name}: {e.msg}", file=sys.stderr)
            return 2
        arms.append(ServeArm(name, spec))
        if args.fixed:
            arms.append(ServeArm(name + "+fixed", spec, load_policy=False))
    if args.llama_gguf and LLAMA_SERVER.exists():
        arms.append(ServeArm("llama-server", llama_gguf=args.llama_gguf))
        if args.llama_draft_gguf:
            arms.append(ServeArm("llama-server+dflash", llama_gguf=args.llama_gguf, llama_draft=args.llama_draft_gguf))
    elif args.llama_gguf:
        print(f"note: {LLAMA_SERVER} not built (make llamacpp): llama-server arms skipped", file=sys.stderr)
    cfg = ServeBenchConfig(
        args.target,
        arms,
        args.concurrency,
        args.requests,
        args.max_tokens,
        args.temperatures,
        args.threads,
        args.seed,
        rounds=args.rounds,
    )
    out = Path(args.out)
    results = run_serve_bench(cfg, out)
    # shell-quoted, so the page's command runs as printed (a --spec's JSON has spaces and quotes)
    command = args.command_line or shlex.join(["lilicorr", "bench", "serve", *sys.argv[3:]])
    page = write_serve_page(results, Path(args.page) if args.page else out / "serving.md", command)
    print(f"wrote {out / 'serve.json'} and {page}")
    return 0


def _register_serve(sub) -> None:
    s = sub.add_parser("serve", help="servers under load: tokens/s, TTFT, ITL, τ and memory at each concurrency")
    s.add_argument("--target", default=SHIPPED_TARGET)
    s.add_argument("--draft", action="append", help="drafter folder: an arm with it (default config, load policy)")
    s.add_argument("--spec", action="append", metavar="NAME=JSON", help="an arm with this speculative config")
    s.add_argument("--fixed", action="store_true", help="each speculative arm also without the load policy")
    s.add_argument("--llama-gguf", default=None, help="also llama-server -np N on this target GGUF")
    s.add_argument("--llama-draft-gguf", default=None, help="… and with this DFlash drafter GGUF")
    s.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    s.add_argument("--requests", type=int, default=64, help="requests per level (at least 2 × concurrency)")
    s.add_argument("--max-tokens", type=int, default=128)
    s.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7, 1.0], help="used in turn")
    s.add_argument("--threads", type=int, default=2, help="threads of each server")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--rounds", type=int, default=1, help="every level N times: median cells, ratios paired by round")
    s.add_argument("--out", default="runs/bench-serve")
    s.add_argument("--page", default=None, help="results page (default: OUT/serving.md); plots beside it")
    s.add_argument("--command-line", default=None, help="the command the page quotes (default: this one)")
    s.set_defaults(func=_bench_serve)


def register(sub) -> None:
    s = sub.add_parser("bench", help="compare proposal methods (τ, speed, head share) on one stack")
    _register_serve(s.add_subparsers(dest="bench_command", metavar="{serve}"))
    s.add_argument("--target", default=SHIPPED_TARGET)
    s.add_argument("--draft", action="append", help="draft checkpoint (repeatable; default: the shipped pair)")
    s.add_argument("--prompts", default=None, help="JSONL (id, category, messages or prompt); default: corpus test")
    s.add_argument("--chat", action="store_true", help="plain prompts get the target's chat template as one user turn")
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--num-prompts", type=int, default=16)
    s.add_argument("--prompt-tokens", type=int, default=48)
    s.add_argument("--max-new-tokens", type=int, default=128)
    s.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--quick", action="store_true", help="4 prompts, 32 tokens, T=0, a tiny sweep: a smoke run")
    s.add_argument("--sweep-concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    s.add_argument("--sweep-input-lens", type=int, nargs="+", default=[64, 2560], help="input lengths of the sweep")
    s.add_argument("--sweep-max-tokens", type=int, default=32)
    s.add_argument("--no-sweep", action="store_true", help="skip the throughput sweep")
    s.add_argument(
        "--paired-ar",
        action="store_true",
        help="time plain decoding of each prompt (and sweep point) just before the arm; speedups vs that",
    )
    s.add_argument("--sweep-pooled", action="store_true", help="sweep one pool of all prompts, not 3 entropy tiers")
    s.add_argument("--sweep-arms", nargs="+", default=None, help="arm names in the sweep (default: every arm)")
    s.add_argument("--only", nargs="+", default=None, help="keep only these arm names (ar always runs)")
    s.add_argument(
        "--num-speculative-tokens",
        type=int,
        nargs="+",
        default=None,
        help="draft lengths to compare (each arm once per value, named ARM@nN); default: the full block",
    )
    s.add_argument(
        "--tree-budgets",
        type=int,
        nargs="+",
        default=None,
        help="fixed tree node budgets to compare (each tree arm also once per value, named ARM@bN)",
    )
    s.add_argument(
        "--draft-vocab-sizes",
        type=int,
        nargs="+",
        default=None,
        help="drafter vocabularies to compare (each drafting arm also once per value, named ARM@vN: the "
        "folder's N most frequent tokens, its draft_vocab.json)",
    )
    s.add_argument(
        "--with-draft-gate",
        action="store_true",
        help="each drafting arm without adaptive verification also with the measured draft gate alone (ARM+gate)",
    )
    s.add_argument("--long-prompts", type=int, default=4, help="long-context prompts added (category 'long')")
    s.add_argument("--long-tokens", type=int, default=2560, help="length of the long prompts")
    s.add_argument("--out", default="runs/bench", help="output folder; a rerun with the same inputs resumes in it")
    add_runtime_args(s, dtype="float32")
    s.set_defaults(func=_bench)

    s = sub.add_parser("report", help="a results page with plots from a bench results.json, or learning curves")
    s.add_argument("results", nargs="?", default=None)
    s.add_argument("--curves", nargs="+", default=None, metavar="RUN", help="training run folders: one PNG to --out")
    s.add_argument("--out", default="docs/results/smollm2-drafters.md")
    s.add_argument("--command", default="", help="the bench command that produced the results")
    s.add_argument("--title", default="Results")
    s.add_argument("--baseline", nargs="+", default=None, help="arm names the derived table divides τ by")
    s.add_argument("--notes", default=None, help="markdown file appended as the page's 'Notes' section")
    s.add_argument("--table", default=None, help="with --curves: also write a markdown page (table + plot) here")
    s.set_defaults(func=_report)
