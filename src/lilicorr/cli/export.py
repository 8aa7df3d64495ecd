"""``lilicorr export``: a drafter checkpoint in another format (``lilicorr.export``, chosen by name)."""

from __future__ import annotations

import argparse
import json
import sys


def _export(args: argparse.Namespace) -> int:
    from lilicorr.checkpoint import CheckpointError
    from lilicorr.export import ExportOptions, export

    name = args.quantize or args.format  # --quantize picks the quantized folder formats
    try:
        info = export(name, args.checkpoint, args.out, ExportOptions(args.target, args.scheme, args.dtype))
    except (CheckpointError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if info.get("head_dropped"):
        print(
            f"note: {args.checkpoint} is a LiLiCorr drafter; llama.cpp has no LiLiCorr head, so the GGUF holds "
            "its DFlash backbone (it drafts as vanilla DFlash there)",
            file=sys.stderr,
        )
    print(json.dumps(info))
    return 0


def register(sub) -> None:
    s = sub.add_parser("export", help="re-write a draft checkpoint (tensor-name scheme A or B, dtype, quantized, GGUF)")
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
    s.set_defaults(func=_export)
