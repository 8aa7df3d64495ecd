"""DFlash block-diffusion draft backbone (Qwen3-style layers with target context injected as K/V).

The fused target features ``hidden_norm(fc(taps))`` are never run through the draft's residual
stream: every layer projects them with its own ``k_proj``/``v_proj`` (+ ``k_norm`` + RoPE at their
absolute positions) and prepends them to the block's keys and values. Queries come only from the
block ``[anchor, MASK × (B−1)]``, which attends to itself without a causal mask.

Parameter names equal the checkpoint tensor names (``layers.{j}.self_attn.q_proj.weight``, ``fc``,
``hidden_norm``, ``norm``), so saving is a plain ``state_dict``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lilicorr.models.config import DraftConfig
from lilicorr.models.conv import GroupedDynamicConv
from lilicorr.models.layers import RMSNorm, apply_rope, rope_cos_sin

KV = tuple[torch.Tensor, torch.Tensor]  # ([batch, kv_heads, n, hd], [batch, kv_heads, n, hd])
Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin [batch, n, hd]


class DraftAttention(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.hd, self.theta = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            hd,
            cfg.rope_theta,
        )
        self.q_proj = nn.Linear(h, self.nh * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, self.nkv * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, self.nkv * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def rope(self, pos: torch.Tensor, dtype: torch.dtype) -> Rope:
        """cos, sin ``[batch, n, head_dim]`` at ``pos``: every layer has the same, so a pass computes them once."""
        return rope_cos_sin(pos, self.hd, self.theta, dtype)

    def project_kv(self, x: torch.Tensor, pos: torch.Tensor, rope: Rope | None = None) -> KV:
        """Keys (normed, rotated) and values of rows ``x`` ``[batch, n, hidden]`` at ``pos`` (``rope``: its
        tables, if the caller has them)."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.nkv, self.hd).transpose(1, 2)
        cos, sin = rope if rope is not None else self.rope(pos, x.dtype)
        return apply_rope(k, cos, sin), v

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, ctx_kv: KV, mask: torch.Tensor, rope: Rope | None = None
    ) -> torch.Tensor:
        """Block rows ``x`` ``[batch, q, hidden]`` attend to ``[context | block]``; ``mask``
        ``[batch, q, ctx + q]`` bool (True = visible)."""
        b, q, _ = x.shape
        qs = self.q_norm(self.q_proj(x).view(b, q, self.nh, self.hd)).transpose(1, 2)
        rope = rope if rope is not None else self.rope(pos, x.dtype)
        qs = apply_rope(qs, *rope)
        kb, vb = self.project_kv(x, pos, rope)
        k = torch.cat([ctx_kv[0], kb], dim=2)
        v = torch.cat([ctx_kv[1], vb], dim=2)
        # grouped K/V as they are (query head h reads K/V head h // (nh / nkv), repeat_interleave's order): no copy
        # of the whole context per head group each step (runtime/attention.py measured that copy on the target)
        out = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask[:, None], enable_gqa=True)  # [batch, nh, q, hd]
        return self.o_proj(out.transpose(1, 2).reshape(b, q, self.nh * self.hd))


class DraftMLP(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = DraftMLP(cfg)
        if cfg.conv_kernel_size:
            self.attention_conv = GroupedDynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
            self.mlp_conv = GroupedDynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        else:
            self.attention_conv = self.mlp_conv = None

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, ctx_kv: KV, mask: torch.Tensor, block: int, rope: Rope | None = None
    ) -> torch.Tensor:
        u = self.input_layernorm(x)
        if self.attention_conv is None:
            x = x + self.self_attn(u, pos, ctx_kv, mask, rope)
        else:
            k = self.attention_conv.coefficients(u)
            y = self.self_attn(self.attention_conv.apply(u, k, 0, block), pos, ctx_kv, mask, rope)
            x = x + self.attention_conv.apply(y, k, 1, block)
        u = self.post_attention_layernorm(x)
        if self.mlp_conv is None:
            return x + self.mlp(u)
        k = self.mlp_conv.coefficients(u)
        return x + self.mlp_conv.apply(self.mlp(self.mlp_conv.apply(u, k, 0, block)), k, 1, block)


class DFlashBackbone(nn.Module):
    """Draft layers + context fusion; token embeddings and (by default) LM head come from the target."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.fc_in_features, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if cfg.has_own_lm_head else None

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """Target taps ``[batch, n, layers·target_hidden]`` → context features ``[batch, n, hidden]``."""
        return self.hidden_norm(self.fc(taps))

    def context_kv(self, ctx: torch.Tensor, pos: torch.Tensor) -> list[KV]:
        """Per-layer K/V of fused context rows (what an inference cache stores)."""
        rope = self.layers[0].self_attn.rope(pos, ctx.dtype)  # one table for every layer
        return [layer.self_attn.project_kv(ctx, pos, rope) for layer in self.layers]

    def forward(
        self,
        block_emb: torch.Tensor,
        block_pos: torch.Tensor,
        ctx_kv: list[KV],
        mask: torch.Tensor,
        block: int | None = None,
    ) -> torch.Tensor:
        """Run query rows ``[batch, q, hidden]`` (one or many blocks of length ``block``) and return
        their final-normed hidden states ``[batch, q, hidden]``."""
        block = block or block_emb.shape[1]
        x = block_emb
        rope = self.layers[0].self_attn.rope(block_pos, x.dtype)  # one table for every layer
        for layer, kv in zip(self.layers, ctx_kv, strict=True):
            x = layer(x, block_pos, kv, mask, block, rope)
        return self.norm(x)

    def draft_block(
        self, block_emb: torch.Tensor, block_pos: torch.Tensor, ctx_kv: list[KV], ctx_mask: torch.Tensor
    ) -> torch.Tensor:
        """Inference: one block per row; visible = valid context columns + the whole block."""
        b, q, _ = block_emb.shape
        mask = torch.cat([ctx_mask, torch.ones(b, q, dtype=torch.bool, device=ctx_mask.device)], dim=1)
        return self.forward(block_emb, block_pos, ctx_kv, mask[:, None, :].expand(b, q, mask.shape[1]), q)


def training_block_mask(anchors: torch.Tensor, ctx_len: int, block: int) -> torch.Tensor:
    """Mask for many anchor blocks of one sequence in one pass: ``[batch, N·B, ctx + N·B]`` bool.

    Block ``i`` (anchor at absolute position ``p_i``) sees context columns ``< p_i`` and its own
    block, bidirectionally; nothing of other blocks. ``anchors`` ``[batch, N]``.
    """
    b, n = anchors.shape
    q = n * block
    ctx_vis = (
        torch.arange(ctx_len, device=anchors.device)[None, None, :]
        < anchors.repeat_interleave(block, dim=1)[:, :, None]
    )
    blk = torch.arange(q, device=anchors.device) // block
    own = (blk[:, None] == blk[None, :])[None].expand(b, q, q)
    return torch.cat([ctx_vis, own], dim=2)
