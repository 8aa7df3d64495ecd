"""``MODEL_CARD.md`` for an imported target (``lilicorr target fetch`` / ``card imported``).

An imported model was not trained here, so its card records where it came from (wheel, file,
hashes, "dequantized from" the GGUF's type), what this machine measured (AR tokens/s per dtype
through the project's own engine) and what it answers (greedy, under its chat template), so a reader
can tell a coherent chat model from a broken conversion at a glance.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.chat import row_ids
from lilicorr.data.wheels import sha256_file
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.machine import bf16_label
from lilicorr.runtime.runtime import TargetRuntime

SAMPLE_QUESTIONS = [
    "What is the capital of France, and what is it famous for?",
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in two sentences why the sky is blue.",
]


def greedy_samples(target: TargetRuntime, prompts: list[list[int]], max_tokens: int) -> tuple[list[str], float]:
    """Greedy continuations of token-id prompts at batch 1; tokens/s over all of them (what a card shows:
    answers for a chat target, continuations for a base one)."""
    tok, eos = target.tokenizer, frozenset(target.eos_token_ids)
    engine = build_engine(target)
    texts, n, secs = [], 0, 0.0
    for ids in prompts:
        req = Request(ids, SamplingParams(max_tokens=max_tokens), eos_ids=eos)
        t0 = time.perf_counter()
        engine.generate([req])
        secs += time.perf_counter() - t0
        n += len(req.output_ids)
        texts.append(req.text(tok.decode))
    return texts, n / secs


def _answers(target: TargetRuntime, max_tokens: int) -> tuple[list[str], float]:
    """Greedy answers to the sample questions under the chat template."""
    prompts = [row_ids(target.tokenizer, {"messages": [{"role": "user", "content": q}]}) for q in SAMPLE_QUESTIONS]
    return greedy_samples(target, prompts, max_tokens)


def write_imported_card(model_dir: Path, wheel: str = "", max_tokens: int = 64) -> Path:
    model_dir = Path(model_dir)
    meta = json.loads((model_dir / "import_gguf.json").read_text())
    cfg = json.loads((model_dir / "config.json").read_text())
    speeds, answers = {}, None
    for dtype in (torch.float32, torch.bfloat16):
        target = TargetRuntime.load(model_dir, dtype=dtype)
        texts, tps = _answers(target, max_tokens)
        speeds[str(dtype).removeprefix("torch.")] = tps
        if dtype == torch.float32:
            answers = texts
    weights = sha256_file(model_dir / "model.safetensors")
    lines = [
        f"# {model_dir.name}",
        "",
        f"Imported, not trained here: `{meta['source_gguf']}` {f'from the pinned wheel `{wheel}` ' if wheel else ''}"
        f"dequantized to {meta['dtype']} by transformers' GGUF loader (`lilicorr target import-gguf`; "
        "`quantization_config` removed). The weights are the GGUF's quantized values, not the original "
        "bf16 release: figures here are for this folder.",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | {meta['architecture']}, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads × {cfg.get('head_dim')}, "
        f"vocab {cfg['vocab_size']}, tied embeddings {cfg.get('tie_word_embeddings')} |",
        f"| parameters | {meta['parameters']:,} |",
        f"| source sha256 | `{meta['source_sha256']}` |",
        f"| model.safetensors sha256 | `{weights}` |",
        "| DFlash mask token | none in the vocabulary: drafters use `<empty_output>` (id 16), an unused one |",
        "",
        f"## AR speed on this machine (lilicorr engine, batch 1, greedy, {max_tokens}-token answers, "
        f"{torch.get_num_threads()} threads, {bf16_label()})",
        "",
        "| dtype | tokens/s |",
        "|---|---|",
        *[f"| {k} | {v:.1f} |" for k, v in speeds.items()],
        "",
        "## Sample answers (greedy, fp32, chat template)",
        "",
    ]
    for q, a in zip(SAMPLE_QUESTIONS, answers or [], strict=True):
        lines += [f"**{q}**", "", "~~~~", a.strip(), "~~~~", ""]  # answers may hold their own code fences
    out = model_dir / "MODEL_CARD.md"
    atomic_write_text(out, "\n".join(lines))
    return out
