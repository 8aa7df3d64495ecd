"""Tokenized corpus splits, cached as flat uint16 arrays, and random-window batches over them.

Documents of one (split, category) are concatenated with ``<|endoftext|>`` between them, the usual
LM pre-training packing; a window may cross a document boundary, which teaches the model to start
afresh after the end-of-text token.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from lilicorr.data.atomic import atomic_write
from lilicorr.data.corpus import read_split


def tokenizer_hash(tokenizer_dir: Path) -> str:
    return hashlib.sha256((Path(tokenizer_dir) / "tokenizer.json").read_bytes()).hexdigest()[:12]


def token_array(corpus: Path, tokenizer_dir: Path, split: str, category: str) -> np.ndarray:
    """Token ids of one split/category, cached under ``corpus/tokens-<tokenizer hash>/``."""
    from tokenizers import Tokenizer

    cache = Path(corpus) / f"tokens-{tokenizer_hash(tokenizer_dir)}" / f"{split}.{category}.npy"
    if cache.exists():
        return np.load(cache, mmap_mode="r")
    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    docs = read_split(corpus, split, category)
    encs = tok.encode_batch([d.text for d in docs], add_special_tokens=False)
    ids: list[int] = []
    for enc in encs:
        ids.extend(enc.ids)
        ids.append(eos)
    arr = np.asarray(ids, dtype=np.uint16)
    atomic_write(cache, lambda p: p.write_bytes(_npy_bytes(arr)))
    return arr


def sample_windows(arr: np.ndarray, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``length`` tokens: ``[batch, length]`` int64."""
    starts = torch.randint(0, len(arr) - length, (batch,), generator=gen).tolist()
    return torch.from_numpy(np.stack([arr[s : s + length].astype(np.int64) for s in starts]))


def fixed_windows(arr: np.ndarray, count: int, length: int) -> torch.Tensor:
    """``count`` evenly spaced windows (deterministic validation set): ``[count, length]``."""
    if len(arr) < length:
        raise ValueError(f"token array of {len(arr)} tokens is shorter than one {length}-token window")
    step = max(1, (len(arr) - length) // count)
    starts = [i * step for i in range(count) if i * step + length <= len(arr)]
    return torch.from_numpy(np.stack([arr[s : s + length].astype(np.int64) for s in starts]))


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()
