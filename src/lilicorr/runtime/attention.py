"""The target's attention: transformers' SDPA, with grouped K/V handed to torch as they are.

transformers' ``sdpa`` attention copies every K/V head ``num_attention_heads / num_key_value_heads`` times
(``repeat_kv``) whenever an attention mask is given, and this runtime always gives one (its cache has holes).
For a decoding step that copy grows with the cache: SmolLM2-135M (9 query heads, 3 K/V heads) at batch 16 with
one 2 048-token row spent 2.1 s of a profiled 3.3 s step in it (docs/results/smollm2-serving-notes.md).
torch's own SDPA takes grouped K/V with a mask (``enable_gqa``) and gives the same result without the copy.

A one-token query in reduced precision (a decoding step) on the CPU runs torch's SDPA in fp32 instead
(``fp32_attention``: q, K and V cast up, the output cast back): torch's CPU flash kernel is slow for a single query
token in bf16 — its fp32 path is not — while for several query tokens (verify passes, prefills) the two dtypes cost
about the same. Measured on the 2-core AMD EPYC (Zen 4, session 44; ``OMP_WAIT_POLICY=PASSIVE python
benchmarks/decode_attention.py``) per layer of SmolLM2's shape (9 query heads, 3 K/V heads, 64 dims), bf16 flash
against this path with its casts: on one thread (a server's small pass, ``runtime/threads.py``) 1 row of 120 columns
117 against 38 µs, of 600 columns 571 against 113, of 2 000 columns 1 935 against 333, 8 rows of 200 columns 1 456
against 274; on two threads 1 row of 120 columns 91 against 103 (the one loss), of 600 columns 433 against 291, 8 rows
1 114 against 414, 32 rows 4 482 against 1 074. Whole one-token passes got 1.1× (1 row, 120 columns) to 1.6–1.9×
(16 rows of 400) faster (``benchmarks/runtime_step.py``). The output's largest error against fp64 attention is no
larger than bf16 flash's (0.0002–0.0018 against 0.0004–0.0018), but it is not bit-identical to it.

``lilicorr_sdpa`` is registered with transformers' ``AttentionInterface`` (and its mask function with
``AttentionMaskInterface``, as sdpa's); ``TargetRuntime`` switches a model that runs ``sdpa`` to it. Anything
this path does not cover — a position bias, attention sinks, a soft-cap, a paged cache, a multi-token query with
no grouping or no mask — goes to transformers' ``sdpa`` unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "lilicorr_sdpa"
_OTHER_KWARGS = ("position_bias", "s_aux", "sinks", "softcap", "cache")


def one_token_in_fp32(query: torch.Tensor) -> bool:
    """Whether ``query [batch, heads, q, dim]`` takes ``fp32_attention``: one query token a row, reduced precision,
    on the CPU (a GPU's fused kernels are another matter, unmeasured here)."""
    return query.device.type == "cpu" and query.shape[2] == 1 and query.dtype in (torch.bfloat16, torch.float16)


def fp32_attention(
    query: torch.Tensor,  # [batch, heads, q, dim]
    key: torch.Tensor,  # [batch, kv_heads, k, dim]
    value: torch.Tensor,  # [batch, kv_heads, k, dim]
    mask: torch.Tensor | None,  # [batch, 1, q, k] bool (True: attend) or additive; None: attend to every key
    scale: float | None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """torch's SDPA over fp32 copies of q, K and V (grouped K/V as they are); returns ``[batch, heads, q, dim]`` in
    the query's dtype."""
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    out = F.scaled_dot_product_attention(
        query.float(),
        key.float(),
        value.float(),
        attn_mask=mask,
        dropout_p=dropout,
        scale=scale,
        enable_gqa=query.shape[1] != key.shape[1],
    )  # [batch, heads, q, dim] fp32
    return out.to(query.dtype)


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
    covered = not any(kwargs.get(k) is not None for k in _OTHER_KWARGS) and not kwargs.get("output_attentions", False)
    if covered and one_token_in_fp32(query):
        out = fp32_attention(query, key, value, attention_mask, scaling, dropout)  # one query: no causal mask to add
    elif covered and groups > 1 and attention_mask is not None:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )  # [batch, heads, q, dim]
    else:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
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
