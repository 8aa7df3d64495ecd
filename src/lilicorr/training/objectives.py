"""Each method's training objective over one shared backbone pass (``BlockPass``): what it reads of the
pass and which loss function (``losses.py``) it applies — DFlash's block cross-entropy, the LiLiCorr
head's lattice loss, and the comparison arms' teacher-forced loss.

``DraftStep`` runs the backbone pass once and sums the objectives its mode (``modes.py``) lists, chosen
once at construction: no per-step branching on the method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from lilicorr.decoding.walk import walk_greedy
from lilicorr.models.layers import over_rows
from lilicorr.training.losses import dflash_loss, head_loss


@dataclass
class BlockPass:
    """The backbone's drafted blocks for a batch, and what the objectives read of it."""

    ph: torch.Tensor  # [b, n, S, H] drafter hidden at the mask slots (after norm)
    logits: torch.Tensor  # [M, S, V] drafter logits, M = b·n blocks
    ctx: torch.Tensor  # [b, t, H] fused target context
    final: torch.Tensor  # [b, t, H] the target's final hidden state
    labels: torch.Tensor  # [M, S] the tokens each slot should predict (indices into ``vocab`` when set)
    valid: torch.Tensor  # [M] bool: blocks that count
    tokens: torch.Tensor  # [b, t]
    anchors: torch.Tensor  # [b, n]
    block: int
    vocab: torch.Tensor | None = None  # [V'] sorted token ids the logits' last axis covers; None: all
    offset: torch.Tensor | None = None  # [V'] sampled-softmax logit offsets of ``vocab`` (sampled negatives)
    _target_logits: torch.Tensor | None = field(default=None, repr=False)

    def target_logits(self, target) -> torch.Tensor:
        """The target's next-token logits at every slot, ``[M, S, V or V']`` over the drafter logits' vocabulary
        (row ``p + s`` of its final hidden state predicts slot ``s``), without gradient; computed once per pass
        for whichever of soft labels, the head's penalty and the validation metrics read them."""
        if self._target_logits is None:
            with torch.no_grad():
                rows = slot_rows(self.final, self.anchors, self.block)  # [b, n·S, H]
                self._target_logits = self.lm_head(target, rows).view(*self.logits.shape)
        return self._target_logits

    def softmax_logits(self, logits: torch.Tensor | None = None) -> torch.Tensor:
        """``logits`` (default the drafter's) plus the sampled-negatives offsets: what a softmax or a CE over the
        training vocabulary reads, so its normaliser estimates the full vocabulary's. Rankings (the top-K
        lattice) read the raw logits, as the engine does."""
        logits = self.logits if logits is None else logits
        return logits if self.offset is None else logits + self.offset.to(logits.dtype)

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids of logit indices (the identity over the full vocabulary)."""
        return idx if self.vocab is None else self.vocab[idx]

    def lm_head(self, target, hidden: torch.Tensor) -> torch.Tensor:
        """The target's LM head over the same vocabulary as ``logits``: ``[..., V or V']``."""
        return vocab_logits(target, hidden.to(target.lm_head.weight.dtype), self.vocab)


def vocab_logits(target, hidden: torch.Tensor, vocab: torch.Tensor | None) -> torch.Tensor:
    """The target's LM head on ``hidden`` ``[..., H]``, over all of the vocabulary or only the token ids ``vocab``
    (one contiguous matrix: ``models.layers.over_rows``)."""
    if vocab is None:
        return over_rows(target.lm_head, hidden)
    weight = target.lm_head.weight[vocab]  # [V', H]
    return over_rows(lambda rows: F.linear(rows, weight), hidden)


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


def scale_grad(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Identity forward; multiplies the gradient by ``scale`` on the way back (1.0: untouched)."""
    if scale == 1.0 or not x.requires_grad:
        return x
    return x.detach() if scale == 0.0 else _ScaleGrad.apply(x, scale)


class Objective:
    """One method's loss over a ``BlockPass``: returns sums and denominators (``*_sum``, ``*_den``), and
    optionally ``walk_ids`` ``[M, S]`` (the method's own draft, for the validation metrics)."""

    def __call__(self, step, bp: BlockPass, want_metrics: bool) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class DFlashObjective(Objective):
    """DFlash: position-decayed cross-entropy of every slot (γ), trains the backbone; with ``kd_weight``
    the target's own distribution at each slot joins the hard label (soft labels)."""

    def __call__(self, step, bp: BlockPass, want_metrics: bool) -> dict[str, torch.Tensor]:
        kd = step.cfg.kd_weight
        zt = bp.softmax_logits(bp.target_logits(step.target)) if kd > 0 else None  # [M, S, V']
        s, d = dflash_loss(bp.softmax_logits(), bp.labels, bp.valid, step.cfg.gamma, zt, kd)
        return {"dflash_sum": s, "dflash_den": d}


def slot_rows(rows: torch.Tensor, anchors: torch.Tensor, block: int) -> torch.Tensor:
    """The target's rows that predict each slot of each block: row ``p + s`` predicts slot ``s`` of the block
    anchored at ``p`` (its token ``p + s + 1``). rows ``[b, t, H]``, anchors ``[b, n]`` → ``[b, n·(B−1), H]``."""
    b, n = anchors.shape
    pos = (anchors[..., None] + torch.arange(block - 1, device=anchors.device)).flatten(1)  # [b, n·S]
    return torch.gather(rows, 1, pos[..., None].expand(b, pos.shape[1], rows.shape[-1]))


def _head_inputs(step, bp: BlockPass):
    """What a head or arm sees of the backbone: identical values, gradient scaled by
    ``head_grad_to_backbone`` where it enters the backbone."""
    scale = step.cfg.head_grad_to_backbone
    return scale_grad(bp.ph, scale), scale_grad(bp.logits, scale), scale_grad(bp.ctx, scale)


class LiLiCorrObjective(Objective):
    """LiLiCorr's head over the top-K lattice of each block: the true path must outscore the others
    (cross-entropy, penalty, margin) and, with ``distill``, match the target's distribution over it."""

    def __call__(self, step, bp: BlockPass, want_metrics: bool) -> dict[str, torch.Tensor]:
        cfg, model, target = step.cfg, step.model, step.target
        b, n = bp.anchors.shape
        dev = bp.tokens.device
        h_ph, h_logits, h_ctx = _head_inputs(step, bp)
        with torch.no_grad():
            ids = torch.topk(bp.logits.detach(), model.cfg.lilicorr.candidate_topk, dim=-1).indices  # [M, S, K]
        lf = h_logits.float()
        lp = lf.gather(-1, ids) - torch.logsumexp(bp.softmax_logits(lf), -1, keepdim=True)  # live log-probs
        emb_c = target.embed_tokens(bp.token_ids(ids)).detach()
        rows = (bp.anchors - 1).clamp_min(0)[..., None].expand(b, n, bp.ctx.shape[-1])
        anchor_rows = torch.gather(h_ctx, 1, rows)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            scores = model.lilicorr(
                h_ph.flatten(0, 1), emb_c, lp, anchor_rows.flatten(0, 1), (bp.anchors >= 1).flatten()
            )
        zt = bp.target_logits(target).float()  # [M, S, V'] lm_head(final hidden) = the target's logits
        head_sum, head_den = head_loss(scores, ids, bp.labels, zt, bp.valid, cfg.head_weights)
        out = {"head_sum": head_sum, "head_den": head_den, "lattice_ids": ids}
        if want_metrics:
            out["walk_ids"] = ids.gather(-1, walk_greedy(scores)[..., None]).squeeze(-1)
        return out


class ArmObjective(Objective):
    """DFlash2's selector / DSpark / Domino: teacher-forced cross-entropy of the arm's sequential walk."""

    def __init__(self, arm: torch.nn.Module):
        self.arm = arm

    def __call__(self, step, bp: BlockPass, want_metrics: bool) -> dict[str, torch.Tensor]:
        from lilicorr.models.arms import teacher_forced_loss

        h_ph, h_logits, _ = _head_inputs(step, bp)
        with torch.autocast(bp.tokens.device.type, dtype=torch.bfloat16, enabled=step.cfg.bf16):
            s, d = teacher_forced_loss(
                self.arm,
                h_ph.flatten(0, 1),
                h_logits,
                bp.labels,
                torch.gather(bp.tokens, 1, bp.anchors).flatten(),
                step.target.embed_tokens,
                bp.valid,
            )
        return {"head_sum": s, "head_den": d}
