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


def long_prompts(corpus: Path, tokenizer, n: int, prompt_tokens: int = 2560, split: str = "test") -> list[dict]:
    """``n`` long-context prompts (category ``long``): the longest test documents, cut to ``prompt_tokens``.

    Drafters are trained on short sequences (256 tokens here); these check that acceptance holds
    when the context is ≥ 10× longer than anything the drafter saw. Documents alternate between
    categories (longest first) so code and prose are both represented.
    """
    docs = read_split(corpus, split, None)
    encoded = [(d, tokenizer.encode(d.text, add_special_tokens=False)) for d in docs]
    long = sorted(((d, ids) for d, ids in encoded if len(ids) >= prompt_tokens), key=lambda x: (-len(x[1]), x[0].id))
    by_cat: dict[str, list] = {}
    for d, ids in long:
        by_cat.setdefault(d.category, []).append((d, ids))
    order = [x for group in zip(*by_cat.values(), strict=False) for x in group] if by_cat else []
    rest = [x for x in long if x not in order]
    out = []
    for d, ids in (order + rest)[:n]:
        cut = prompt_tokens
        text = tokenizer.decode(ids[:cut])
        while len(tokenizer.encode(text, add_special_tokens=False)) < prompt_tokens and cut < len(ids):
            cut += 1  # a cut inside a merge re-encodes shorter: extend until the prompt really has the length
            text = tokenizer.decode(ids[:cut])
        out.append(
            {
                "id": f"{split}-long-{len(out)}",
                "prompt": text,
                "category": "long",
                "source": d.id,
            }
        )
    if len(out) < n:
        raise ValueError(f"only {len(out)} {split} documents have ≥ {prompt_tokens} tokens; asked for {n}")
    return out
