"""What the runtime needs to know about a target's architecture, and what it refuses by name.

Why a module of its own: "any Hugging Face causal LM" holds only as far as three things are true of the
model, and each family breaks a different one. The hole-tolerant cache (``runtime.py``) appends every
token as a column and hides rejected ones, so an attention window must count *positions*, not columns:
transformers' own sliding-window masks and its window-cropping cache layers count columns, so for a
model with sliding-window layers (Mistral, Gemma 2/3, Phi-3 where set) the runtime keeps every layer's
cache whole and builds the window masks itself, per layer type. A drafter borrows the target's input
embedding and LM head, so the first hidden state must be exactly ``get_input_embeddings()(ids)`` (Gemma's
√hidden scale lives in its embedding module and passes; a multiplier applied inside ``forward`` does
not) and the logits exactly ``lm_head(last hidden state)`` (a logit soft-cap or scale does not: the
drafter drafts through the plain head and the trainer rebuilds the target's distribution from it).
``drafter_support`` checks these once, when a drafter is attached, and names what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FULL, SLIDING = "full_attention", "sliding_attention"

# config fields that change the logits or the input embeddings outside the two shared modules
LOGIT_FIELDS = ("final_logit_softcapping", "logits_scaling", "logit_scale", "output_multiplier_scale")
EMBED_FIELDS = ("embedding_multiplier", "scale_emb", "embedding_multiplier_scale")
# config fields a drafter's geometry is copied from (training/draft_config.target_geometry), each with the
# alternatives it falls back to (the rest — KV heads, head size, MLP width — have defaults of their own)
DRAFTER_FIELDS = (("hidden_size",), ("num_attention_heads",),
                  ("rms_norm_eps", "layer_norm_eps", "norm_epsilon", "layer_norm_epsilon"))  # fmt: skip


@dataclass(frozen=True)
class AttentionLayout:
    """Per decoder layer: full attention, or a sliding window of ``windows[i]`` positions (a query sees
    itself and the ``window − 1`` positions before it, as transformers' ``sliding_window_overlay``)."""

    layer_types: tuple[str, ...]
    windows: tuple[int | None, ...]
    per_type: bool  # the model takes a dict of masks keyed by layer type (its config has ``layer_types``)
    eager: bool  # eager attention adds the mask: it needs a float mask, not a boolean one

    @property
    def window(self) -> int | None:
        """The smallest window of any layer; None: every layer attends to the whole prefix."""
        ws = [w for w in self.windows if w is not None]
        return min(ws) if ws else None

    @property
    def unsupported(self) -> list[str]:
        return sorted({t for t in self.layer_types if t not in (FULL, SLIDING)})


def attention_layout(config) -> AttentionLayout:
    """transformers' own reading of the layer types (``get_layer_types_and_kwargs``, what ``DynamicCache``
    builds its layers from), so the runtime's windows are the model's."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True)
    types, kwargs = get_layer_types_and_kwargs(text)
    windows = tuple(kw.get("sliding_window") if t == SLIDING else None for t, kw in zip(types, kwargs, strict=True))
    impl = getattr(text, "_attn_implementation", None) or "sdpa"
    return AttentionLayout(tuple(types), windows, getattr(text, "layer_types", None) is not None, impl == "eager")


def live_positions(valid: torch.Tensor) -> torch.Tensor:
    """``[batch, cols]`` RoPE position of each cache column (its rank among the row's live columns; holes
    get their left neighbour's, and are masked anyway)."""
    return valid.long().cumsum(1) - 1


def layer_masks(
    layout: AttentionLayout,
    visible: torch.Tensor,
    query_pos: torch.Tensor,
    key_pos: torch.Tensor,
    dtype: torch.dtype,
):
    """The ``attention_mask`` argument for a forward whose columns ``visible [batch, q, k]`` may attend:
    a 4D mask ``[batch, 1, q, k]``, or a dict per layer type where some layers slide (their keys also
    within the window of each query's position: ``query_pos [batch, q]``, ``key_pos [batch, k]``)."""

    def model_mask(m: torch.Tensor) -> torch.Tensor:  # [batch, 1, q, k]
        if not layout.eager:
            return m
        return torch.zeros(m.shape, dtype=dtype).masked_fill(~m, torch.finfo(dtype).min)

    full = model_mask(visible[:, None])
    win = layout.window
    if win is None:
        return full
    near = (query_pos[:, :, None] - key_pos[:, None, :]) < win  # [batch, q, k]
    sliding = model_mask((visible & near)[:, None])
    if layout.per_type:
        return {FULL: full, SLIDING: sliding}
    if all(t == SLIDING for t in layout.layer_types):
        return sliding
    raise ValueError("mixed full and sliding-window layers in a model without per-layer-type masks")


def drafter_support(model) -> list[str]:
    """What keeps a drafter from running on ``model`` (empty: nothing). One forward of three tokens."""
    cfg = model.config.get_text_config(decoder=True)
    problems = []
    if getattr(model.config, "is_encoder_decoder", False):
        problems.append("an encoder-decoder model: the engine runs decoder-only causal LMs")
    layout = attention_layout(model.config)
    if layout.unsupported:
        problems.append(
            f"layer types {layout.unsupported}: the engine's cache handles full and sliding-window attention only"
        )
    elif layout.window is not None and not layout.per_type and len(set(layout.layer_types)) > 1:
        problems.append("mixed full and sliding-window layers without per-layer-type masks (no config.layer_types)")
    elif len({w for w in layout.windows if w is not None}) > 1:
        problems.append(
            f"sliding windows of several sizes {sorted({w for w in layout.windows if w})}: one is supported"
        )
    for f in LOGIT_FIELDS:
        if getattr(cfg, f, None) not in (None, 0, 0.0, 1, 1.0):
            problems.append(f"config.{f} = {getattr(cfg, f)}: the logits are not the plain LM head's")
    for f in EMBED_FIELDS:
        if getattr(cfg, f, None) not in (None, 1, 1.0):
            problems.append(f"config.{f} = {getattr(cfg, f)}: the input embeddings are rescaled inside forward")
    if problems:
        return problems
    return _probe(model)


def training_support(config) -> list[str]:
    """What keeps the trainer from building a drafter for ``config`` (empty: nothing): the fields its
    geometry is copied from. The engine does not need them: a drafter trained elsewhere still runs."""
    cfg = config.get_text_config(decoder=True)
    missing = [" / ".join(fs) for fs in DRAFTER_FIELDS if all(getattr(cfg, f, None) is None for f in fs)]
    return [f"config fields {missing} missing: the trainer copies a drafter's geometry from them"] if missing else []


@torch.no_grad()
def _probe(model) -> list[str]:
    """The same two facts, measured: first hidden state == embedding, logits == LM head(last hidden state)."""
    dev = next(model.parameters()).device
    ids = torch.tensor([[1, 2, 3]], device=dev) % model.config.get_text_config(decoder=True).vocab_size
    out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    problems = []
    n = model.config.get_text_config(decoder=True).num_hidden_layers
    if hs is None or len(hs) != n + 1:
        return [f"hidden states: expected {n + 1} (embeddings + one per layer), got {None if hs is None else len(hs)}"]
    emb = model.get_input_embeddings()(ids)
    if not torch.allclose(hs[0].float(), emb.float(), rtol=1e-3, atol=1e-5):
        problems.append("the first hidden state is not get_input_embeddings()(ids): forward rescales the embeddings")
    head = model.get_output_embeddings()
    if head is None:
        return [*problems, "no output embeddings (get_output_embeddings() is None): no LM head to share"]
    logits = head(hs[-1]).float()
    scale = float(logits.abs().max().clamp_min(1.0))
    if not torch.allclose(out.logits.float(), logits, rtol=0, atol=2e-3 * scale):
        problems.append("the logits are not get_output_embeddings()(last hidden state): the head is post-processed")
    return problems
