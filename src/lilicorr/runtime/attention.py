"""The target's attention: transformers' SDPA, with grouped K/V handed to torch as they are.

transformers' ``sdpa`` attention copies every K/V head ``num_attention_heads / num_key_value_heads`` times
(``repeat_kv``) whenever an attention mask is given, and this runtime always gives one (its cache has holes).
For a decoding step that copy grows with the cache: SmolLM2-135M (9 query heads, 3 K/V heads) at batch 16 with
one 2 048-token row spent 2.1 s of a profiled 3.3 s step in it (docs/results/smollm2-serving-notes.md).
torch's own SDPA takes grouped K/V with a mask (``enable_gqa``) and gives the same result without the copy.

``lilicorr_sdpa`` is registered with transformers' ``AttentionInterface`` (and its mask function with
``AttentionMaskInterface``, as sdpa's); ``TargetRuntime`` switches a model that runs ``sdpa`` to it. Anything
this path does not cover — a position bias, attention sinks, a soft-cap, a paged cache, no grouping or no
mask — goes to transformers' ``sdpa`` unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "lilicorr_sdpa"
_OTHER_KWARGS = ("position_bias", "s_aux", "sinks", "softcap", "cache")


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, dim]
    key: torch.Tensor,  # [batch, kv_heads, k, dim]
    value: torch.Tensor,  # [batch, kv_heads, k, dim]
    attention_mask: torch.Tensor | None,  # [batch, 1, q, k] bool or additive
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; returns ``[batch, q, heads, dim]`` as its sdpa does."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups == 1
        or attention_mask is None
        or any(kwargs.get(k) is not None for k in _OTHER_KWARGS)
        or kwargs.get("output_attentions", False)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )  # [batch, heads, q, dim]
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ``lilicorr_sdpa`` known to transformers (idempotent); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, grouped_sdpa)
        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return NAME


def use_grouped_sdpa(model: torch.nn.Module) -> None:
    """Switch ``model`` from transformers' ``sdpa`` to ``lilicorr_sdpa``; any other implementation (eager, flash)
    is left as chosen."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    register()
    model.set_attn_implementation(NAME)
