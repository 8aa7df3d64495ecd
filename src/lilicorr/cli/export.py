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
        opts = ExportOptions(args.target, args.scheme, args.dtype, args.draft_vocab, args.backbone_only)
        info = export(name, args.checkpoint, args.out, opts)
    except (CheckpointError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if str(info.get("layout", "")).startswith("lilicorr"):
        print(
            f"note: {args.checkpoint} keeps its LiLiCorr head in the GGUF; it needs the patched llama-server of "
            "`make llamacpp` (an unpatched llama.cpp refuses the file)",
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
        "--draft-vocab",
        type=int,
        default=None,
        metavar="N",
        help="--format gguf: draft over the N most frequent tokens of the folder's draft_vocab.json (writes d2t and "
        "those rows of the target GGUF's LM head; llama.cpp scatters them back to the full vocabulary)",
    )
    s.add_argument(
        "--backbone-only",
        action="store_true",
        help="--format gguf: leave the LiLiCorr head / arm out (the DFlash backbone, for an unpatched llama.cpp)",
    )
    s.add_argument(
        "--quantize",
        choices=["nvfp4", "int8"],
        default=None,
        help="nvfp4: ModelOpt layout (weight-only, group 16); int8: W8A8 compressed-tensors. The head's "
        "float-only modules stay bf16 and are written as exclusions",
    )
    s.set_defaults(func=_export)
