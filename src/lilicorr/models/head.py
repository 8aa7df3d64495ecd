"""LiLiCorr head: scores how well candidates at consecutive draft slots fit together.

DFlash's per-slot marginals are individually plausible but jointly incoherent. The head looks at
the whole top-K lattice at once (one small transformer over slot × K candidates) and gives each
candidate an *out* and an *in* unit vector; cosine(out of the earlier, in of the later) × scale is
the pair log-potential, and an anchor built from the last accepted position gives start scores.
All pair scores come from one batched matmul; only the walk over them is sequential.

Geometry, parameter names (Scheme A) and the order of floating-point operations follow the
engines that serve these checkpoints (vLLM ≥ 0.32, SGLang 0.5.23), so scores agree to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lilicorr.models.config import DraftConfig

NUM_FEATURES = 5  # lp, p, lp − max lp, rank fraction, is-top1 — order fixed by the trained first Linear


@dataclass
class HeadScores:
    start: torch.Tensor  # [batch, K] fp32: log-potential of each slot-0 candidate
    pair: torch.Tensor  # [batch, n−1, K, K] fp32: [s, i, j] = slot s cand i → slot s+1 cand j


class SiluMLP(nn.Module):
    """``down_proj(silu(up_proj(x)))``: the head's feature MLP and each lattice layer's MLP (the tensor
    names are the checkpoint's)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.up_proj = nn.Linear(d_in, d_hidden)
        self.down_proj = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.up_proj(x)))


class LatticeAttention(nn.Module):
    """``nn.MultiheadAttention`` parameter layout (``in_proj_weight`` rows q, k, v), additive bias."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)
        nn.init.xavier_uniform_(self.in_proj_weight)  # PyTorch MHA default

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, L, width]``, ``bias`` ``[heads, L, L]`` additive."""
        b, n, w = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        shape = (b, n, self.heads, w // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(x.dtype)[None])
        return self.out_proj(out.transpose(1, 2).reshape(b, n, w))


class LatticeLayer(nn.Module):
    def __init__(self, width: int, heads: int, mlp_hidden: int, eps: float):
        super().__init__()
        self.attn_norm = nn.RMSNorm(width, eps=eps)
        self.attn = LatticeAttention(width, heads)
        self.mlp_norm = nn.RMSNorm(width, eps=eps)
        self.mlp = SiluMLP(width, mlp_hidden, width)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), bias)
        return x + self.mlp(self.mlp_norm(x))


class LiLiCorrHead(nn.Module):
    """Candidate-lattice correlator. Parameter names are the checkpoint's ``lilicorr.*`` names."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        g = cfg.lilicorr
        if g is None:
            raise ValueError("LiLiCorrHead needs a config with LiLiCorr geometry")
        hm, h = cfg.hidden_size, cfg.head_width
        self.block_size, self.k = cfg.block_size, g.candidate_topk
        self.heads, self.eps, self.scale = g.num_heads, g.vector_eps, g.logit_scale
        s = cfg.num_slots
        self.token_proj = nn.Linear(hm, h) if h != hm else None
        self.pass_hidden_proj = nn.Linear(hm, h)
        self.context_proj = nn.Linear(hm, h)
        self.feature_norm = nn.LayerNorm(NUM_FEATURES, eps=1e-5)
        self.feature_mlp = SiluMLP(NUM_FEATURES, h, h)
        self.slot_embedding = nn.Parameter(torch.zeros(1, 1, s, 1, h))
        self.rank_embedding = nn.Parameter(torch.zeros(1, 1, 1, g.candidate_topk, h))
        self.relative_slot_bias = nn.Parameter(torch.zeros(g.num_heads, 2 * cfg.block_size - 1))
        self.same_slot_bias = nn.Parameter(torch.zeros(g.num_heads))
        self.layers = nn.ModuleList(
            LatticeLayer(h, g.num_heads, int(h * g.mlp_ratio), cfg.rms_norm_eps) for _ in range(g.num_layers)
        )
        # torch's RMSNorm, as the engines use for the head (its bf16 rounding differs from Qwen3's).
        self.output_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.anchor_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.factor_input_proj = nn.Linear(3 * h, h)
        self.out_head = nn.Linear(h, g.factor_dim)
        self.in_head = nn.Linear(h, g.factor_dim)
        self.anchor_out_head = nn.Linear(h, g.factor_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Training init: Linears N(0, 0.02) with zero bias (a zero init of the factor heads is a
        dead saddle), embeddings and slot biases zero, lattice ``in_proj`` at the MHA default."""
        for name, mod in self.named_modules():
            if isinstance(mod, nn.Linear):
                nn.init.normal_(mod.weight, std=0.02)
                nn.init.zeros_(mod.bias)
            elif name.endswith("attn") and isinstance(mod, LatticeAttention):
                nn.init.xavier_uniform_(mod.in_proj_weight)
                nn.init.zeros_(mod.in_proj_bias)
        for p in (self.slot_embedding, self.rank_embedding, self.relative_slot_bias, self.same_slot_bias):
            nn.init.zeros_(p)

    def slot_bias(self, n: int) -> torch.Tensor:
        """Additive lattice bias ``[heads, n·K, n·K]``; the offset stays the trained ``B−1``."""
        slot = torch.arange(n * self.k, device=self.same_slot_bias.device) // self.k
        rel = slot[:, None] - slot[None, :] + (self.block_size - 1)  # [nK, nK]
        same = (slot[:, None] == slot[None, :]).to(self.same_slot_bias.dtype)
        return self.relative_slot_bias[:, rel] + self.same_slot_bias[:, None, None] * same

    @staticmethod
    def features(lp: torch.Tensor) -> torch.Tensor:
        """Five per-candidate features from fp32 log-probs ``[..., K]`` → ``[..., K, 5]`` fp32."""
        k = lp.shape[-1]
        rank = torch.arange(k, device=lp.device, dtype=torch.float32) / (k - 1) if k > 1 else torch.zeros(1)
        rank = rank.expand_as(lp)
        top1 = torch.zeros_like(lp)
        top1[..., 0] = 1.0
        return torch.stack([lp, lp.exp(), lp - lp.max(-1, keepdim=True).values, rank, top1], dim=-1)

    def anchor(self, anchor_hidden: torch.Tensor, anchor_valid: torch.Tensor) -> torch.Tensor:
        """``[batch, Hm]`` fused features of the last accepted position → ``[batch, H]``; zero if invalid."""
        valid = anchor_valid.to(anchor_hidden.dtype)[:, None]
        return self.anchor_norm(self.context_proj(anchor_hidden) * valid)

    def forward(
        self,
        pass_hidden: torch.Tensor,
        token_emb: torch.Tensor,
        lp: torch.Tensor,
        anchor_hidden: torch.Tensor,
        anchor_valid: torch.Tensor,
    ) -> HeadScores:
        """Score a lattice.

        pass_hidden ``[batch, n, Hm]`` (draft output after ``norm``, mask slots 1..n);
        token_emb ``[batch, n, K, Hm]`` (target embedding of the candidates);
        lp ``[batch, n, K]`` fp32 (full-vocabulary log-softmax of the candidates, rank order);
        anchor_hidden ``[batch, Hm]``; anchor_valid ``[batch]`` bool.
        """
        b, n, k, _ = token_emb.shape
        if not 1 <= n <= self.block_size - 1:
            raise ValueError(f"draft length {n} outside 1..{self.block_size - 1} (trained block {self.block_size})")
        if k != self.k:
            raise ValueError(f"lattice has {k} candidates per slot, head was trained for K={self.k}")
        dtype = self.slot_embedding.dtype
        tok = self.token_proj(token_emb) if self.token_proj is not None else token_emb
        ps = self.pass_hidden_proj(pass_hidden)[:, :, None, :]  # [b, n, 1, H]
        feats = self.feature_mlp(self.feature_norm(self.features(lp.float()).to(dtype)))  # [b, n, K, H]
        x = ((tok + ps) + feats) + self.slot_embedding[0, 0, :n] + self.rank_embedding[0, 0, 0]
        x = x.reshape(b, n * k, -1)  # slot-major lattice sequence
        bias = self.slot_bias(n)
        for layer in self.layers:
            x = layer(x, bias)
        h = self.output_norm(x).reshape(b, n, k, -1)  # [b, n, K, H]
        a = self.anchor(anchor_hidden, anchor_valid)  # [b, H]
        w = self.factor_input_proj.weight
        hw = w.shape[0]
        w_x, w_a, w_c = w[:, :hw], w[:, hw : 2 * hw], w[:, 2 * hw :]
        a4 = a[:, None, None, :]
        g = F.silu(F.linear(h, w_x, self.factor_input_proj.bias) + F.linear(a4, w_a) + F.linear(h * a4, w_c))
        out = F.normalize(self.out_head(g), dim=-1, eps=self.eps)  # [b, n, K, F]
        inn = F.normalize(self.in_head(g), dim=-1, eps=self.eps)  # [b, n, K, F]
        ao = F.normalize(self.anchor_out_head(a), dim=-1, eps=self.eps)  # [b, F]
        # Elementwise product then sum (not a matmul): the engines' form, so bf16 rounding agrees.
        start = (ao[:, None, :] * inn[:, 0]).sum(-1)  # [b, K]
        pair = torch.matmul(out[:, :-1], inn[:, 1:].transpose(-1, -2))  # [b, n−1, K, K]
        return HeadScores(start=self.scale * start.float(), pair=self.scale * pair.float())


def candidates(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-K ids (descending, rank 0 = argmax) and their fp32 full-vocabulary log-softmax.

    ``logits`` ``[..., vocab]`` → ids ``[..., K]`` long, lp ``[..., K]`` fp32.
    """
    vals, ids = torch.topk(logits, k, dim=-1)
    lp = vals.float() - torch.logsumexp(logits.float(), dim=-1, keepdim=True)
    return ids, lp


# Modules that must stay floating point under quantization: their weights are read directly,
# split or fused after load, or have a 5-wide input no low-bit GEMM supports.
FLOAT_ONLY_MODULES: tuple[str, ...] = (
    "lilicorr.layers.*.attn.in_proj_weight",
    "lilicorr.layers.*.attn.in_proj_bias",
    "lilicorr.factor_input_proj",
    "lilicorr.out_head",
    "lilicorr.in_head",
    "lilicorr.feature_mlp",
    "lilicorr.feature_norm",
)
