"""Held-out prompts cut from the corpus test split, the same way for model cards, generate and bench.

Each prompt is a fixed-length token prefix taken from a test document at a position derived from
the document id, so the set is deterministic and never seen in training.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lilicorr.data.corpus import read_split


def test_prompts(
    corpus: Path, tokenizer, n: int, prompt_tokens: int = 48, category: str | None = None, split: str = "test"
) -> list[dict]:
    """``n`` prompts ``{id, prompt, category}``; categories alternate when ``category`` is None."""
    docs = read_split(corpus, split, category)
    by_cat: dict[str, list] = {}
    for d in docs:
        by_cat.setdefault(d.category, []).append(d)
    cats = sorted(by_cat)
    out: list[dict] = []
    rounds = 0
    while len(out) < n and rounds < 64:
        for ci, cat in enumerate(cats):
            pool = by_cat[cat]
            idx = (len(out) // len(cats) + ci * 7 + rounds * 13) % len(pool)
            doc = pool[idx]
            ids = tokenizer.encode(doc.text, add_special_tokens=False)
            if len(ids) < prompt_tokens + 8:
                continue
            h = int.from_bytes(hashlib.sha256(f"{doc.id}#{rounds}".encode()).digest()[:4], "big")
            start = h % (len(ids) - prompt_tokens)
            pid = f"{split}-{cat}-{len(out)}"
            out.append(
                {
                    "id": pid,
                    "prompt": tokenizer.decode(ids[start : start + prompt_tokens]),
                    "category": cat,
                    "source": doc.id,
                }
            )
            if len(out) >= n:
                break
        rounds += 1
    return out
