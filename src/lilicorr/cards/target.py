"""Evaluate a trained target and write its ``MODEL_CARD.md`` from measured figures only.

The card carries a repetition measure (distinct 4-grams of greedy continuations) because a target
that only loops would make every drafter look good: its future is trivially predictable.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.corpus import CATEGORIES
from lilicorr.data.prompts import test_prompts
from lilicorr.data.tokens import fixed_windows, token_array
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.target import evaluate_lm


def distinct_ngram_ratio(seqs: list[list[int]], n: int = 4) -> float:
    """Mean over sequences of (distinct n-grams / n-grams): 1.0 = no repetition."""
    ratios = []
    for s in seqs:
        grams = [tuple(s[i : i + n]) for i in range(len(s) - n + 1)]
        if grams:
            ratios.append(len(set(grams)) / len(grams))
    return sum(ratios) / max(1, len(ratios))


def _continue(target: TargetRuntime, prompts: list[dict], params: SamplingParams) -> list[Request]:
    tok = target.tokenizer
    reqs = [
        Request(
            tok.encode(p["prompt"], add_special_tokens=False),
            SamplingParams(**vars(params)),
            id=p["id"],
            eos_ids=frozenset(target.eos_token_ids),
        )
        for p in prompts
    ]
    return build_engine(target).generate(reqs)


def evaluate_target(model_dir: Path, corpus: Path, seq_len: int = 256, windows: int = 64) -> dict:
    """Loss/top-1 per split and category, samples, and the repetition measure."""
    target = TargetRuntime.load(model_dir)
    tok = target.tokenizer
    model = target.model
    tok_dir = model_dir  # the model folder carries the same tokenizer.json the corpus cache is keyed by
    metrics: dict = {}
    for split in ("validation", "test"):
        for cat in CATEGORIES:
            w = fixed_windows(token_array(corpus, tok_dir, split, cat), windows, seq_len + 1)
            metrics[f"{split}/{cat}"] = evaluate_lm(model, w, bf16=False)
    prompts = test_prompts(corpus, tok, 32, prompt_tokens=48)
    t0 = time.perf_counter()
    greedy = _continue(target, prompts, SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True))
    gen_time = time.perf_counter() - t0
    sampled = _continue(target, prompts[:3], SamplingParams(max_tokens=64, temperature=1.0, seed=0))
    decode = tok.decode
    return {
        "metrics": metrics,
        "distinct4_greedy_128": distinct_ngram_ratio([r.output_ids for r in greedy], 4),
        "batch32_greedy_tokens_per_s": round(32 * 128 / gen_time, 1),
        "samples_greedy": [
            {"prompt": p["prompt"], "continuation": decode(r.output_ids[:64]), "category": p["category"]}
            for p, r in zip(prompts[:3], greedy[:3], strict=True)
        ],
        "samples_t1": [
            {"prompt": p["prompt"], "continuation": r.text(decode), "category": p["category"]}
            for p, r in zip(prompts[:3], sampled, strict=True)
        ],
    }


def _fence(text: str) -> str:
    return "```\n" + text.replace("```", "'''") + "\n```"


def write_target_card(model_dir: Path, corpus: Path, command: str, threads: int = 2) -> dict:
    torch.set_num_threads(threads)
    summary = json.loads((model_dir / "training_summary.json").read_text())
    cfg = json.loads((model_dir / "config.json").read_text())
    ev = evaluate_target(model_dir, corpus, seq_len=summary["config"]["seq_len"])
    (model_dir / "eval.json").write_text(json.dumps(ev, indent=2) + "\n")
    tc = summary["config"]
    rows = "\n".join(
        f"| {k.split('/')[0]} | {k.split('/')[1]} | {v['loss']:.3f} | {v['top1']:.3f} |"
        for k, v in ev["metrics"].items()
    )
    samples = []
    for kind, key in (("greedy (T=0)", "samples_greedy"), ("sampled (T=1, seed 0)", "samples_t1")):
        for i, s in enumerate(ev[key]):
            samples.append(
                f"**{kind} #{i + 1}** ({s['category']})\n\nPrompt:\n{_fence(s['prompt'])}\n"
                f"Continuation:\n{_fence(s['continuation'])}\n"
            )
    card = f"""# {model_dir.name}

A small `Qwen3ForCausalLM` target trained from scratch by lilicorr on its offline corpus (CPython
stdlib code + Python/Perl documentation prose). It exists so that drafters, the engine, the
server and the benchmarks have a real target to run on a CPU-only machine.

## Architecture

| field | value |
|---|---|
| parameters | {summary["params"]:,} |
| hidden size | {cfg["hidden_size"]} |
| layers | {cfg["num_hidden_layers"]} |
| attention heads / kv heads / head dim | {cfg["num_attention_heads"]} / {cfg["num_key_value_heads"]} / {cfg["head_dim"]} |
| MLP intermediate | {cfg["intermediate_size"]} |
| vocabulary | {cfg["vocab_size"]} (byte-level BPE; `<|endoftext|>`=0, `<|im_start|>`=1, `<|im_end|>`=2, `<|mask|>`=3) |
| tied embeddings | {cfg.get("tie_word_embeddings")} |
| max positions | {cfg["max_position_embeddings"]} (trained on {tc["seq_len"]}-token windows) |
| dtype on disk | bfloat16 |

## Training (measured)

Command (run from the repository root, after `lilicorr data corpus --out data/corpus` and
`lilicorr train tokenizer --corpus data/corpus --out data/tokenizer`):

```
{command}
```

| item | value |
|---|---|
| seed | {tc["seed"]} |
| corpus manifest hash | `{summary["corpus_manifest_hash"]}` (`data/corpus_manifest.json`) |
| steps × batch × sequence | {summary["steps"]} × {tc["batch_size"]} × {tc["seq_len"]} (code fraction {tc["code_fraction"]}) |
| tokens seen | {summary["tokens_seen"]:,} |
| optimiser | AdamW (β 0.9/0.95, wd {tc["weight_decay"]}), peak lr {tc["lr"]}, warm-up {tc["warmup"]}, cosine to {tc["min_lr_ratio"]}×, clip {tc["grad_clip"]}, bf16 autocast |
| wall time | {summary["wall_time_s"] / 60:.1f} min on {tc["threads"]} CPU thread(s) (another training shared the 2-core machine) |

## Evaluation (fp32, {64} windows of {tc["seq_len"]} tokens per split and category)

| split | category | loss | top-1 accuracy |
|---|---|---|---|
{rows}

Repetition: distinct-4-gram ratio of 128-token greedy continuations of 32 test-split prompts
(48-token prefixes; 1.0 = no repeated 4-gram): **{ev["distinct4_greedy_128"]:.3f}**.
Batch-32 greedy generation ran at {ev["batch32_greedy_tokens_per_s"]} tokens/s here
({threads} threads, Python {platform.python_version()}, torch {torch.__version__}).

Reproduce this section: `lilicorr card target {model_dir} --command "…"` (writes `eval.json` too).

## Samples (test-split prompts, first 64 generated tokens)

{chr(10).join(samples)}
"""
    atomic_write_text(model_dir / "MODEL_CARD.md", card)
    return ev
