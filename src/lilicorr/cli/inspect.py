"""``lilicorr inspect CKPT [--target DIR]``: geometry, parameter counts and the validation verdict."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def add_inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="draft checkpoint folder (DFlashDraftModel or LiLiCorrDraftModel)")
    p.add_argument("--target", help="target folder: also check vocabulary, widths and layer ids against it")
    p.add_argument("--num-speculative-tokens", type=int, default=None)
    p.add_argument("--json", action="store_true")


def _module_of(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "lilicorr":
        return ".".join(parts[:2]) if parts[1] != "layers" else f"lilicorr.layers.{parts[2]}"
    return ".".join(parts[:2]) if parts[0] == "layers" else parts[0]


def run_inspect(args: argparse.Namespace) -> int:
    from safetensors import safe_open

    from lilicorr.checkpoint import CheckpointError, validate_draft_folder
    from lilicorr.decoding.config import check_num_speculative_tokens

    target_cfg = None
    try:
        if args.target:
            from transformers import AutoConfig

            target_cfg = AutoConfig.from_pretrained(args.target)
        cfg, sources, quantized = validate_draft_folder(args.checkpoint, target_cfg)
    except CheckpointError as e:
        print(f"INVALID: {e}")
        return 1
    except (OSError, ValueError) as e:
        print(f"INVALID: target {args.target}: {e}")
        return 1
    if args.num_speculative_tokens is not None:
        try:
            check_num_speculative_tokens(args.num_speculative_tokens, cfg.block_size)
        except ValueError as e:
            print(f"INVALID: {e}")
            return 1
    counts: Counter[str] = Counter()
    for name, (f, raw) in sources.items():
        if name.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        with safe_open(str(f), framework="pt") as sf:
            shape = sf.get_slice(raw).get_shape()
        n = 1
        for s in shape:
            n *= s
        if quantized.get(name.removesuffix(".weight")) == "nvfp4":
            n *= 2  # two 4-bit values per stored byte
        counts[_module_of(name)] += n
    total = sum(counts.values())
    head = sum(v for k, v in counts.items() if k.startswith("lilicorr"))
    info = {
        "checkpoint": str(Path(args.checkpoint)),
        "architecture": cfg.architecture,
        "backbone": {
            "hidden_size": cfg.hidden_size,
            "layers": cfg.num_hidden_layers,
            "heads": f"{cfg.num_attention_heads}/{cfg.num_key_value_heads}x{cfg.head_dim}",
            "intermediate_size": cfg.intermediate_size,
            "block_size": cfg.block_size,
            "mask_token_id": cfg.mask_token_id,
            "target_layer_ids": cfg.target_layer_ids,
            "conv": [cfg.conv_kernel_size, cfg.conv_group_size] if cfg.conv_kernel_size else None,
            "has_own_lm_head": cfg.has_own_lm_head,
        },
        "lilicorr": vars(cfg.lilicorr) if cfg.lilicorr else None,
        "parameters": {"total": total, "head": head, "backbone": total - head, "per_module": dict(counts)},
        "quantized_modules": quantized,
        "verdict": "VALID" + (f" for target {args.target}" if args.target else " (no target checked)"),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['checkpoint']}: {cfg.architecture}")
    for k, v in info["backbone"].items():
        print(f"  {k:18} {v}")
    if cfg.lilicorr:
        for k, v in info["lilicorr"].items():
            print(f"  lilicorr_{k:12} {v}")
    print(f"  parameters         {total:,} (backbone {total - head:,}, head {head:,})")
    for k, v in sorted(counts.items()):
        print(f"    {k:32} {v:>12,}")
    if quantized:
        schemes = sorted(set(quantized.values()))
        print(f"  quantized          {len(quantized)} linear layers ({', '.join(schemes)}); every other module float:")
        for m in sorted(quantized):
            print(f"    {m:40} {quantized[m]}")
    print(info["verdict"])
    return 0


def register(sub) -> None:
    s = sub.add_parser("inspect", help="explain a draft checkpoint: geometry, parameters, validity")
    add_inspect_args(s)
    s.set_defaults(func=run_inspect)
