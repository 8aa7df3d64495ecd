"""Small draft configurations for model tests."""

from __future__ import annotations

from lilicorr.models.config import DraftConfig, LiLiCorrGeometry


def small_cfg(
    lilicorr: bool = True,
    head_width: int = 0,
    conv: bool = False,
    block: int = 6,
    k: int = 4,
    vocab: int = 300,
    hidden: int = 32,
) -> DraftConfig:
    return DraftConfig(
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=vocab,
        block_size=block,
        mask_token_id=3,
        target_layer_ids=[0, 2],
        conv_kernel_size=2 if conv else 0,
        conv_group_size=8 if conv else 0,
        lilicorr=LiLiCorrGeometry(
            candidate_topk=k,
            hidden_size=head_width,
            num_layers=2,
            num_heads=4,
            mlp_ratio=2.0,
            factor_dim=16,
            vector_eps=1e-4,
            logit_scale=8.0,
        )
        if lilicorr
        else None,
    )
