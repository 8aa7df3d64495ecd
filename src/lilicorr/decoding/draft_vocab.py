"""A drafter's inference vocabulary: its LM head over the N most frequent tokens only.

Why: a DFlash drafter drafts through the target's LM head, and on a CPU that product over the whole
vocabulary is most of a drafting step (SmolLM2: 49 152 × 576 per drafted slot; a 7-slot block measured
23 ms in fp32 and 5.7 ms in bf16 against 2.2 / 0.8 ms over 8 192 tokens on an Intel AMX core pair,
``python benchmarks/draft_head_cost.py``).
Drafting from the frequent tokens only costs some acceptance (a token outside the set cannot be drafted)
and nothing else: verification never reads the drafter's logits, so every method stays lossless.
LiLiCorr's log-prob features are then normalised over the same set, as in training with ``--train-vocab``.

File: ``DRAFT_DIR/draft_vocab.json`` — ``{"token_ids": [most frequent first, …], "source": …}``, written by
``lilicorr data draft-vocab``. vLLM and SGLang ignore it (the checkpoint itself is unchanged); the engine
reads its first ``draft_vocab_size`` ids when the speculative config asks for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from lilicorr.data.atomic import atomic_write_text
from lilicorr.runtime.packed_linear import pack_linears

FILE = "draft_vocab.json"
# Logit of every token outside the vocabulary: far below any real logit, yet finite, so softmax gives it
# exactly 0 and p·log p stays 0 (−inf would make 0·−inf = NaN) at any temperature a request may use.
OUTSIDE = -1.0e6


def token_frequency_order(rows: Iterable[list[int]], vocab_size: int) -> tuple[list[int], int]:
    """Token ids that occur in ``rows``, most frequent first (ties: lower id first), and the tokens counted."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    total = 0
    for row in rows:
        ids = torch.as_tensor(row, dtype=torch.long)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            raise ValueError(f"token id out of range 0..{vocab_size - 1} in the counted rows")
        counts += torch.bincount(ids, minlength=vocab_size)
        total += len(ids)
    seen = (counts > 0).nonzero().flatten()
    order = seen[torch.argsort(-counts[seen], stable=True)]  # seen is ascending: ties keep the lower id first
    return order.tolist(), total


def write_draft_vocab(draft_dir: str | Path, order: list[int], source: dict, default_size: int = 0) -> Path:
    """Write ``draft_vocab.json`` into the drafter folder (atomically); ``default_size`` > 0: the folder's default
    configuration drafts from that many of its tokens (``default_draft_vocab``)."""
    if not 0 <= default_size <= len(order):
        raise ValueError(f"default_size {default_size}: expected 0..{len(order)} (the ids kept)")
    path = Path(draft_dir) / FILE
    extra = {"default_size": default_size} if default_size else {}
    atomic_write_text(path, json.dumps({"token_ids": order, **extra, "source": source}) + "\n")
    return path


def default_draft_vocab(draft_dir: str | Path) -> int:
    """The draft vocabulary the folder's default configuration uses: ``draft_vocab.json``'s ``default_size``, 0
    (the whole vocabulary) without one. Why a field of the folder: whether a reduced head pays depends on the
    target's vocabulary (SmolLM2's 49 152 tokens: left off, its shipped defaults were measured without; Gemma 3's
    262 144: the head alone outweighs the drafter's layers), so the folder that ships the list says whether to
    use it."""
    path = Path(draft_dir) / FILE
    if not path.exists():
        return 0
    try:
        size = json.loads(path.read_text()).get("default_size", 0)
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{path}: expected a JSON object with 'token_ids' ({e})") from e
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"{path}: field 'default_size' must be a count of tokens >= 0 (found {size!r})")
    return size


def read_draft_vocab(draft_dir: str | Path | None, size: int, vocab_size: int) -> torch.Tensor:
    """The ``size`` most frequent ids of the folder's ``draft_vocab.json``, sorted ascending: ``[size]``."""
    if draft_dir is None:
        raise ValueError("draft_vocab_size needs a drafter folder (its draft_vocab.json)")
    path = Path(draft_dir) / FILE
    if not path.exists():
        raise ValueError(
            f"draft_vocab_size {size}: {path} not found (make it with `lilicorr data draft-vocab --out {draft_dir}`)"
        )
    try:
        ids = json.loads(path.read_text())["token_ids"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: expected a JSON object with 'token_ids' ({e})") from e
    if not 1 <= size <= len(ids):
        raise ValueError(f"draft_vocab_size {size}: {path} lists {len(ids)} token ids (expected 1..{len(ids)})")
    out = torch.tensor(ids[:size], dtype=torch.long)
    if int(out.min()) < 0 or int(out.max()) >= vocab_size or len(out.unique()) != size:
        raise ValueError(f"{path}: token ids must be distinct and in 0..{vocab_size - 1}")
    return out.sort().values


class VocabHead:
    """An LM head restricted to ``ids``: logits of those tokens, ``OUTSIDE`` for every other one, so the
    proposers read a full-vocabulary tensor ``[…, V]`` and need no index mapping."""

    def __init__(self, weight: torch.Tensor, ids: torch.Tensor):
        self.ids = ids.to(weight.device)
        self.weight = weight.detach()[self.ids].contiguous()  # [V', H]
        self.vocab_size = weight.shape[0]
        self.linear = nn.utils.skip_init(
            nn.Linear, weight.shape[1], len(self.ids), bias=False, device=weight.device, dtype=weight.dtype
        )
        self.linear.weight = nn.Parameter(self.weight, requires_grad=False)  # [V', H]: the rows kept, not a copy
        pack_linears(self.linear)  # as the full head it replaces: packed once (runtime/packed_linear.py)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        part = self.linear(hidden.to(self.weight.dtype)).float()  # [..., V']
        full = part.new_full((*part.shape[:-1], self.vocab_size), OUTSIDE)  # [..., V]
        full[..., self.ids] = part
        return full
