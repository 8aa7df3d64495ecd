"""Comparison arms: the other draft-time coherence heads on a DFlash backbone (docs/guide/head.md).

Each reads the backbone's per-slot hidden states and base logits and adds a dependence on the
previously chosen token, so drafting becomes a cheap sequential walk:

- ``DFlash2Selector``: ``score[k] = unary[k] + ⟨E_pred[prev] ⊙ W_h h, E_succ[cand_k]⟩`` over the
  top-K candidates (two V×r codebooks, rank r);
- ``DSparkMarkov``: a full-vocabulary transition bias ``(W1[prev] @ W2)[v]`` added to the base logits;
- ``DominoGRU``: a GRU over the block's previous-token embeddings, whose state and the slot hidden
  give a low-rank full-vocabulary logit delta.

They are saved beside a standard ``DFlashDraftModel`` checkpoint as ``arm.safetensors`` + ``arm.json``,
so the backbone stays loadable by vLLM and SGLang and the arm is a measurement add-on.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

ARM_KINDS = ("dflash2", "dspark", "domino")


class DFlash2Selector(nn.Module):
    """Unary top-K logit + low-rank predecessor × hidden × successor bilinear score."""

    kind = "dflash2"

    def __init__(self, vocab: int, hidden: int, rank: int = 64, k: int = 8):
        super().__init__()
        self.k = k
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.pred_embedding = nn.Embedding(vocab, rank)
        self.succ_embedding = nn.Embedding(vocab, rank)
        nn.init.normal_(self.pred_embedding.weight, std=0.02)
        nn.init.normal_(self.succ_embedding.weight, std=0.02)

    def scores(self, hidden: torch.Tensor, cand: torch.Tensor, unary: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """hidden ``[..., H]``, cand/unary ``[..., K]``, prev ``[...]`` → scores ``[..., K]``."""
        g = self.hidden_projection(hidden) * self.pred_embedding(prev)  # [..., r]
        return unary + (self.succ_embedding(cand) * g[..., None, :]).sum(-1)

    def slot_scores(self, hidden, base, prev, state, embed):
        """One drafting slot (the arms' common interface): scores over the top-K candidates ``cand``."""
        unary, cand = torch.topk(base, self.k, dim=-1)  # [b, K]
        return self.scores(hidden, cand, unary, prev), cand, state


class DSparkMarkov(nn.Module):
    """Full-vocabulary transition bias from the previous token, rank r."""

    kind = "dspark"

    def __init__(self, vocab: int, hidden: int, rank: int = 64):
        super().__init__()
        self.w1 = nn.Embedding(vocab, rank)
        self.w2 = nn.Linear(rank, vocab, bias=False)
        nn.init.normal_(self.w1.weight, std=0.02)
        nn.init.zeros_(self.w2.weight)  # starts as the plain backbone

    def logits(self, hidden: torch.Tensor, base: torch.Tensor, prev: torch.Tensor, state=None):
        return base + self.w2(self.w1(prev)), None

    def slot_scores(self, hidden, base, prev, state, embed):
        """One drafting slot: full-vocabulary logits given the previous token (no candidate list)."""
        row, state = self.logits(hidden, base, prev, state)
        return row, None, state


class DominoGRU(nn.Module):
    """GRU over previous-token embeddings; ``[h; s]`` → low-rank MLP → full-vocabulary logit delta."""

    kind = "domino"

    def __init__(self, vocab: int, hidden: int, rank: int = 64):
        super().__init__()
        self.prefix_gru = nn.GRUCell(hidden, hidden)
        self.embed_proj = nn.Sequential(nn.Linear(2 * hidden, rank), nn.SiLU(), nn.Linear(rank, vocab))
        nn.init.zeros_(self.embed_proj[2].weight)
        nn.init.zeros_(self.embed_proj[2].bias)

    def logits(self, hidden: torch.Tensor, base: torch.Tensor, prev_emb: torch.Tensor, state: torch.Tensor | None):
        """One step: ``prev_emb`` ``[b, H]`` (embedding of the previous token), ``state`` ``[b, H]``."""
        state = self.prefix_gru(prev_emb, state)
        return base + self.embed_proj(torch.cat([hidden, state], -1)), state

    def slot_scores(self, hidden, base, prev, state, embed):
        """One drafting slot: the GRU reads the target embedding of the previous token."""
        row, state = self.logits(hidden, base, embed(prev).to(hidden.dtype), state)
        return row, None, state


ARMS = {  # kind -> builder(vocab, hidden, rank, k)
    "dflash2": lambda vocab, hidden, rank, k: DFlash2Selector(vocab, hidden, rank, k),
    "dspark": lambda vocab, hidden, rank, k: DSparkMarkov(vocab, hidden, rank),
    "domino": lambda vocab, hidden, rank, k: DominoGRU(vocab, hidden, rank),
}


def build_arm(kind: str, vocab: int, hidden: int, rank: int, k: int) -> nn.Module:
    if kind not in ARMS:
        raise ValueError(f"unknown arm {kind!r}: expected one of {ARM_KINDS}")
    return ARMS[kind](vocab, hidden, rank, k)


def save_arm(arm: nn.Module, folder: Path, meta: dict) -> None:
    folder = Path(folder)
    (folder / "arm.json").write_text(json.dumps({"kind": arm.kind, **meta}, indent=2) + "\n")
    save_file(
        {k: v.detach().to(torch.bfloat16).contiguous() for k, v in arm.state_dict().items()},
        str(folder / "arm.safetensors"),
    )


def arm_kind(folder: Path) -> str | None:
    """The kind of the comparison arm saved in ``folder`` (its ``arm.json``), or None."""
    meta = Path(folder) / "arm.json"
    return str(json.loads(meta.read_text())["kind"]) if meta.exists() else None


def load_arm(folder: Path, dtype: torch.dtype = torch.float32) -> nn.Module | None:
    folder = Path(folder)
    if not (folder / "arm.json").exists():
        return None
    meta = json.loads((folder / "arm.json").read_text())
    arm = build_arm(meta["kind"], meta["vocab"], meta["hidden"], meta["rank"], meta.get("k", 8))
    arm.load_state_dict({k: v.to(dtype) for k, v in load_file(str(folder / "arm.safetensors")).items()}, strict=True)
    return arm.to(dtype).eval()


def teacher_forced_loss(
    arm: nn.Module,
    hidden: torch.Tensor,
    base: torch.Tensor,
    labels: torch.Tensor,
    anchor_tokens: torch.Tensor,
    embed: nn.Embedding,
    valid: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) of the arm's CE with the true previous token fed at each slot.

    hidden ``[M, S, H]``, base ``[M, S, V]`` live backbone logits, labels ``[M, S]``, anchor tokens ``[M]``
    (predecessor of slot 0), valid ``[M]``.
    """
    m, s, _ = hidden.shape
    prev = torch.cat([anchor_tokens[:, None], labels[:, :-1]], 1)  # [M, S]
    vm = valid[:, None].float().expand(m, s)
    if isinstance(arm, DFlash2Selector):
        unary, cand = torch.topk(base.detach(), arm.k, dim=-1)  # [M, S, K]
        hit = cand == labels[..., None]
        # Truth missing from the top-K: inject it into the loss candidate set (last column) only.
        inject = ~hit.any(-1)
        cand = torch.where(
            inject[..., None] & (torch.arange(arm.k, device=labels.device) == arm.k - 1), labels[..., None], cand
        )
        unary_live = base.gather(-1, cand)
        sc = arm.scores(hidden, cand, unary_live, prev)
        tgt = (cand == labels[..., None]).float().argmax(-1)
        ce = F.cross_entropy(sc.flatten(0, 1).float(), tgt.flatten(), reduction="none").view(m, s)
        return (ce * vm).sum(), vm.sum()
    if isinstance(arm, DSparkMarkov):
        logits, _ = arm.logits(hidden, base, prev)
    else:
        state, rows = None, []
        pe = embed(prev).to(hidden.dtype)  # [M, S, H]
        for j in range(s):
            out, state = arm.logits(hidden[:, j], base[:, j], pe[:, j], state)
            rows.append(out)
        logits = torch.stack(rows, 1)
    ce = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="none").view(m, s)
    return (ce * vm).sum(), vm.sum()
