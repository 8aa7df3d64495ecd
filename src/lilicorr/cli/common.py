"""What several commands share: the runtime flags (``--threads``, ``--dtype``, ``--device``), the methods'
options generated from the registry, and reading a prompts file."""

from __future__ import annotations

import argparse
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16")


def add_runtime_args(
    p: argparse.ArgumentParser,
    threads: int | None = 2,
    dtype: str | None = "auto",
    dtypes: tuple[str, ...] = DTYPES,
    device: str | None = "auto",
) -> None:
    """The shared runtime flags, one group; ``None`` leaves a flag out."""
    g = p.add_argument_group("runtime")
    g.add_argument("--threads", type=int, default=threads, help=f"torch threads (default: {threads or 'torch'})")
    if dtype is not None:
        g.add_argument(
            "--dtype",
            default=dtype,
            choices=list(dtypes),
            help="weights (auto: bf16 on CUDA or a CPU with AMX-bf16 / AVX512-BF16, else fp32)",
        )
    if device is not None:
        g.add_argument(
            "--device",
            default=device,
            choices=["auto", "cpu", "cuda"],
            help="where the target runs (auto: CUDA when available); the drafter and the engine stay on the CPU",
        )


def add_method_args(p: argparse.ArgumentParser) -> None:
    """``--method`` and every method's own options, generated from the methods registry."""
    from lilicorr.decoding.methods import METHODS, method_names

    lines = "; ".join(f"{m}: {METHODS[m].help}" for m in method_names())
    p.add_argument(
        "--method",
        choices=method_names(),
        default=None,
        help="proposal method. Default with --draft alone (no method option, draft length or sampling chosen): "
        "the fastest lossless configuration measured (lilicorr.decoding.config.FASTEST: a LiLiCorr folder runs "
        "lilicorr-tree with 16 nodes, the prompt-lookup graft and the measured draft gate, a DFlash folder ddtree "
        "likewise, an arm folder its arm); with any of those chosen, what the folder is (vLLM's rule); "
        "ar without --draft. "
        f"{lines}",
    )
    seen = set()
    for m in method_names():
        for o in METHODS[m].options:
            if o.key not in seen:
                seen.add(o.key)
                # methods may share a key (ngram and the trees: prompt_lookup_*) with their own defaults
                defaults = {x: d.default for x in method_names() for d in METHODS[x].options if d.key == o.key}
                shown = ", ".join(f"{x} {v}" for x, v in defaults.items())
                flag = "--" + o.key.replace("_", "-")
                p.add_argument(flag, type=o.parse, default=None, help=f"{o.help} (default: {shown})")


def method_options(args: argparse.Namespace) -> dict[str, int | str]:
    """The method options given on the command line (the method checks that they are its own)."""
    from lilicorr.decoding.methods import option_keys

    return {k: getattr(args, k) for k in option_keys() if getattr(args, k, None) is not None}


def untuned(args: argparse.Namespace) -> bool:
    """No method, method option, draft length or draft sampling chosen: the defaults decide everything."""
    return (
        args.method is None
        and not method_options(args)
        and args.num_speculative_tokens is None
        and args.draft_sample_method == "greedy"
    )


def read_prompts(path: Path) -> list[dict]:
    """Prompts JSONL: rows with ``messages`` or ``prompt``; ``id`` and ``category`` optional."""
    from lilicorr.data.prompt_sets import read_prompt_rows

    if not path.exists():
        raise SystemExit(f"error: prompts file {path} not found")
    try:
        records = read_prompt_rows(path)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from e
    if not records:
        raise SystemExit(f"error: {path}: no prompts")
    return records
