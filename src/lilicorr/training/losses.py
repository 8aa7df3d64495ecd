"""The loss functions themselves — tensors in, (sum, denominator) out — with no model in sight:
DFlash's position-decayed block cross-entropy and the LiLiCorr head's lattice loss. Which losses a
training mode sums over a ``BlockPass`` is ``objectives.py``'s business (and ``modes.py`` picks them).

Returning sums (not means) lets data-parallel training divide by the *global* denominator, so
two processes with half the batch each compute exactly the gradient of one process with all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lilicorr.models.head import HeadScores
from lilicorr.options import option


def sample_anchors(
    loss_mask: torch.Tensor, n: int, block: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random anchor positions per sequence: ``[batch, n]`` sorted, and which are valid.

    Anchor ``p`` is valid when it has context (``p ≥ 1``), its block fits, and every predicted
    position ``p+1 .. p+B−1`` is supervised. Sequences with fewer valid anchors repeat one and mark
    the extras invalid.
    """
    b, t = loss_mask.shape
    s = block - 1
    ok = torch.zeros(b, t, dtype=torch.bool)
    if t > s:
        windows = loss_mask[:, 1:].unfold(1, s, 1).all(-1)  # [b, t - s]: slots p+1..p+s supervised
        ok[:, : windows.shape[1]] = windows
    ok[:, 0] = False
    anchors = torch.zeros(b, n, dtype=torch.long)
    valid = torch.zeros(b, n, dtype=torch.bool)
    for i in range(b):
        cand = ok[i].nonzero().flatten()
        if len(cand) == 0:
            continue
        pick = cand[torch.randperm(len(cand), generator=gen)[:n]].sort().values
        anchors[i, : len(pick)] = pick
        valid[i, : len(pick)] = True
        anchors[i, len(pick) :] = pick[0]
    return anchors, valid


def block_labels(tokens: torch.Tensor, anchors: torch.Tensor, block: int) -> torch.Tensor:
    """Tokens at positions ``p+1 .. p+B−1`` of each anchor: ``[batch, n, B−1]``."""
    idx = anchors[..., None] + torch.arange(1, block, device=anchors.device)  # [b, n, S]
    return torch.gather(tokens, 1, idx.flatten(1).clamp_max(tokens.shape[1] - 1)).view(idx.shape)


def dflash_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    valid: torch.Tensor,
    gamma: float,
    target_logits: torch.Tensor | None = None,
    kd_weight: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same-position CE with slot decay ``w_k = exp(−(k−1)/γ)``: (weighted sum, weight sum).

    logits ``[M, S, V]``, labels ``[M, S]``, valid ``[M]`` blocks. With ``target_logits`` ``[M, S, V]`` (the
    target's next-token logits at each slot, same vocabulary) and ``kd_weight`` λ, each slot's loss is
    (1 − λ)·CE(label) + λ·CE(softmax(target)) — soft labels; the second term is the KL to the target's
    distribution plus its (constant) entropy.
    """
    s = labels.shape[1]
    w = torch.exp(-torch.arange(s, dtype=torch.float32, device=labels.device) / gamma)  # k−1 = 0..S−1
    ce = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none").view(labels.shape)
    if kd_weight > 0:
        assert target_logits is not None and target_logits.shape == logits.shape
        soft = -(target_logits.float().softmax(-1) * logits.float().log_softmax(-1)).sum(-1)  # [M, S]
        ce = (1.0 - kd_weight) * ce + kd_weight * soft
    wv = w[None] * valid[:, None].float()
    return (ce * wv).sum(), wv.sum()


@dataclass
class HeadLossWeights:
    ce: float = option(0.25, "head loss: cross-entropy weight", flag="--w-ce")
    margin: float = option(0.0, "head loss: margin weight", flag="--w-margin")
    penalty: float = option(0.25, "head loss: penalty weight", flag="--w-pen")
    margin_value: float = option(2.0, "head loss: margin", flag="--w-margin-value")
    # Cross-entropy from the target's distribution restricted to the K candidates (renormalised) to the
    # head's conditional softmax: makes the probabilistic walk's q a calibrated proposal at T = 1, not
    # just a ranking (0 = the reference recipe, which has no such term).
    distill: float = option(
        0.0, "weight of distilling the target's distribution over the lattice into the head (T>0)", flag="--w-distill"
    )


def lattice_truth(
    ids: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where the truth sits in the lattice: index ``[M, S]``, in-lattice ``[M, S]``, supervised prefix ``[M, S]``."""
    hit = ids == labels[..., None]  # [M, S, K]
    in_lattice = hit.any(-1)
    gt = hit.float().argmax(-1)
    prefix = in_lattice.long().cumprod(-1).bool() & valid[:, None]
    return gt, in_lattice, prefix


def head_loss(
    scores: HeadScores,
    ids: torch.Tensor,
    labels: torch.Tensor,
    target_logits: torch.Tensor,
    valid: torch.Tensor,
    w: HeadLossWeights,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced lattice loss (w_ce·CE + w_margin·hinge + w_pen·penalty + w_distill·distill), supervised prefix.

    ids ``[M, S, K]`` (the drafter's own top-K, no gold injection), labels ``[M, S]``,
    target_logits ``[M, S, V]`` detached (row s predicts the label of slot s). Returns (sum, count).
    """
    m, s, k = ids.shape
    gt, _, mask = lattice_truth(ids, labels, valid)
    rows = [scores.start]  # node_0
    for j in range(1, s):  # node_s = pair[s−1, gt_{s−1}, :] (teacher forcing on the true predecessor)
        rows.append(scores.pair[torch.arange(m, device=gt.device), j - 1, gt[:, j - 1]])
    node = torch.stack(rows, 1)  # [M, S, K]
    logp = torch.log_softmax(node, -1)
    ce = -logp.gather(-1, gt[..., None]).squeeze(-1)
    total = w.ce * ce
    if w.margin > 0 and k > 1:
        true = node.gather(-1, gt[..., None]).squeeze(-1)
        other = node.masked_fill(F.one_hot(gt, k).bool(), float("-inf")).max(-1).values
        total = total + w.margin * F.relu(w.margin_value - (true - other))
    if w.penalty > 0:
        zt = target_logits.float()
        z_cand = zt.gather(-1, ids)  # [M, S, K]
        z_true = zt.gather(-1, labels[..., None])  # [M, S, 1]
        total = total + w.penalty * (logp.exp() * F.relu(z_true - z_cand)).sum(-1)
    if w.distill > 0:
        p_k = torch.softmax(target_logits.float().gather(-1, ids), -1)  # [M, S, K] target over the lattice
        total = total + w.distill * -(p_k * logp).sum(-1)
    maskf = mask.float()
    return (total * maskf).sum(), maskf.sum()


@torch.no_grad()
def block_metrics(
    logits: torch.Tensor,
    labels: torch.Tensor,
    valid: torch.Tensor,
    ids: torch.Tensor | None = None,
    walk_ids: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Sums for validation metrics over valid blocks (divide by ``blocks``).

    With ``target_logits`` ``[M, S, V]`` (the target's next-token logits at each slot, teacher forced):
    ``t1_prefix``, the expected accepted prefix of a chain drafted by sampling each slot from the drafter's
    softmax at T = 1 and verified by rejection sampling, whose slot ``s`` is accepted with probability
    Σ_v min(p_s(v), q_s(v)). Teacher forcing conditions p on the held-out prefix instead of the drafted one:
    an estimate for ranking recipes at T = 1 (on sampled rows), as the top-1 prefix is for T = 0."""
    vm = valid.float()
    pred = logits.argmax(-1)  # [M, S]
    top1 = pred == labels  # [M, S]
    out = {
        "blocks": vm.sum(),
        "slot_acc": (top1.float() * vm[:, None]).sum(0),
        "top1_prefix": (top1.long().cumprod(-1).sum(-1).float() * vm).sum(),
        # neighbouring slots predicting the same token: a drafter collapsed onto "the next token" everywhere
        "neighbour_same": ((pred[:, 1:] == pred[:, :-1]).float().mean(-1) * vm).sum(),
    }
    if ids is not None:
        _, in_lat, prefix = lattice_truth(ids, labels, valid)
        out["in_lattice"] = (in_lat.float() * vm[:, None]).sum(0)
        out["oracle_prefix"] = prefix.sum(-1).float().sum()
    if walk_ids is not None:
        out["walk_prefix"] = ((walk_ids == labels).long().cumprod(-1).sum(-1).float() * vm).sum()
    if target_logits is not None:
        accept = torch.minimum(target_logits.float().softmax(-1), logits.float().softmax(-1)).sum(-1)  # [M, S]
        out["t1_prefix"] = (accept.cumprod(-1).sum(-1) * vm).sum()
    return out
