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
            # the default named: `bench` defaults to fp32 where the other commands take the machine's choice, and a
            # results page once called an fp32 bench bf16 (session 37)
            help=f"weights (default: {dtype}; auto: bf16 on CUDA or a CPU with AMX-bf16 / AVX512-BF16, else fp32)",
        )
    if device is not None:
        g.add_argument(
            "--device",
            default=device,
            choices=["auto", "cpu", "cuda"],
            help="where the target runs (auto: CUDA when available); the drafter and the engine stay on the CPU",
        )


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """The speculative config's flags, generated: its common keys from ``SpecConfig``'s fields and every
    method's own options from the methods registry (each key once; methods may share one, e.g. ngram and
    the trees ``prompt_lookup_*``, each with its own default, shown)."""
    from lilicorr.decoding.config import SpecConfig
    from lilicorr.decoding.methods import METHODS, method_names
    from lilicorr.options import add_options

    g = p.add_argument_group("speculative config (vLLM's keys; serve: --speculative-config)")
    add_options(g, SpecConfig)
    seen = set()
    for m in method_names():
        for o in METHODS[m].option_list():
            if o.key not in seen:
                seen.add(o.key)
                defaults = {x: d.default for x in method_names() for d in METHODS[x].option_list() if d.key == o.key}
                shown = ", ".join(f"{x} {v}" for x, v in defaults.items())
                g.add_argument(
                    "--" + o.key.replace("_", "-"), type=o.parse, default=None, help=f"{o.help} (default: {shown})"
                )


def spec_from_args(args: argparse.Namespace):
    """The ``SpecConfig`` the command line asks for (method options: those given; the method checks them)."""
    from lilicorr.decoding.config import SpecConfig
    from lilicorr.decoding.methods import option_keys
    from lilicorr.options import from_args

    options = {k: getattr(args, k) for k in option_keys() if getattr(args, k, None) is not None}
    return from_args(SpecConfig, args, options=options)


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
