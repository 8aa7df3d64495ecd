"""The target's attention: transformers' SDPA, with grouped K/V handed to torch as they are.

transformers' ``sdpa`` attention copies every K/V head ``num_attention_heads / num_key_value_heads`` times
(``repeat_kv``) whenever an attention mask is given, and this runtime always gives one (its cache has holes).
For a decoding step that copy grows with the cache: SmolLM2-135M (9 query heads, 3 K/V heads) at batch 16 with
one 2 048-token row spent 2.1 s of a profiled 3.3 s step in it (docs/results/smollm2-serving-notes.md).
torch's own SDPA takes grouped K/V with a mask (``enable_gqa``) and gives the same result without the copy.

A one-token query in bf16 (a decoding step) on the CPU takes ``decode_attention`` instead from ``DECODE_MIN_ROWS``
rows up, and from ``ONE_THREAD_MIN_ROWS`` on one thread (a small pass under ``runtime/threads.py``): torch's flash
kernel for CPU is slow there in reduced precision (its fp32 path is not), so two matrix products and a softmax beat
it. Measured on the 2-core AMD EPYC (Zen 4, session 43; ``OMP_WAIT_POLICY=PASSIVE python
benchmarks/decode_attention.py``, two runs) per layer of SmolLM2's shape (9 query heads, 3 K/V heads, 64 dims), flash
against this path: on one thread 1 row 116 against 107–108 µs, 2 rows 278 against 134–238, 4 rows 555–762 against
175–332, 32 rows of 200 columns 6 282 against 1 010; on two threads 1 row 156 against 360, 4 rows 367–514 against
447–549 (a loss: each operator wakes the second thread), 8 rows 853–1 101 against 523–702, 32 rows 3 295–5 347
against 1 124–1 456, 16 rows of 1 000 columns 8 382–8 532 against 2 629–2 848 — at 32 rows, attention was 63 % of a
plain step. Its scores are rounded to bf16 before the fp32 softmax, as transformers' eager attention does: the
output's largest error against fp32 attention was 0.002–0.006 against flash's 0.001–0.002. Verify passes (several
query tokens a row) and fp32 keep the flash kernel, which wins or ties there on two threads.

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
DECODE_MIN_ROWS = 8  # rows from which a one-token bf16 query takes decode_attention (two threads lose at 4)
ONE_THREAD_MIN_ROWS = 2  # … and on one thread, where it wins from 2 rows


def decodes_better(query: torch.Tensor) -> bool:
    """Whether ``decode_attention`` beats torch's SDPA for ``query [batch, heads, q, dim]``: one query token a row,
    enough rows, reduced precision, on the CPU (a GPU's fused kernels are another matter, unmeasured here)."""
    return (
        query.device.type == "cpu"
        and query.shape[2] == 1
        and query.shape[0] >= (ONE_THREAD_MIN_ROWS if torch.get_num_threads() == 1 else DECODE_MIN_ROWS)
        and query.dtype != torch.float32
    )


def decode_attention(
    query: torch.Tensor,  # [batch, heads, q, dim]
    key: torch.Tensor,  # [batch, kv_heads, k, dim]
    value: torch.Tensor,  # [batch, kv_heads, k, dim]
    mask: torch.Tensor,  # [batch, 1, q, k] bool (True: attend) or additive
    scale: float | None,
) -> torch.Tensor:
    """Grouped attention as two products and a softmax; returns ``[batch, heads, q, dim]``. The query heads that
    share a K/V head are stacked as its rows (head ``i`` reads K/V head ``i // groups``, as ``repeat_kv``), so
    nothing is copied per group."""
    b, h, n, d = query.shape
    kvh = key.shape[1]
    g = h // kvh
    scores = torch.matmul(query.reshape(b, kvh, g * n, d), key.transpose(-1, -2))  # [b, kv_heads, g·q, k]
    scores = scores.view(b, kvh, g, n, -1).float() * (d**-0.5 if scale is None else scale)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[:, :, None], float("-inf"))  # [b, 1, 1, q, k] over the groups
    else:
        scores = scores + mask[:, :, None].float()
    probs = scores.softmax(-1).to(value.dtype).view(b, kvh, g * n, -1)
    return torch.matmul(probs, value).view(b, h, n, d)


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
    if decodes_better(query) and not dropout:
        out = decode_attention(query, key, value, attention_mask, scaling)
    else:
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
