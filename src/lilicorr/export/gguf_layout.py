"""What a LiLiCorr / DFlash2 / reduced-vocabulary drafter adds to llama.cpp's DFlash GGUF, as plain arrays.

llama.cpp's converter writes the DFlash backbone (``general.architecture = dflash``); everything the
backbone file lacks is computed here from the checkpoint and appended by ``gguf_append.py``:

- the LiLiCorr head: ``lilicorr.*`` keys and ``lilicorr.*`` tensors, all F32 (the head is small — 0.6 M
  parameters for ``smollm2-lilicorr`` — and F32 keeps llama.cpp's scores within rounding of ours);
- the DFlash2 convolution keys (``dflash.conv_kernel_size`` / ``conv_group_size``; the tensors themselves
  are the converter's ``blk.N.{attn,ffn}_conv_{base,proj}``);
- our ``dflash2`` arm as llama.cpp's DFlash2 selector (``selector_*`` tensors and keys);
- a reduced draft vocabulary: ``d2t`` (I64 target ids) and an ``output`` of those rows only.

Names and layouts are documented key by key in docs/guide/deploy-llamacpp.md. Tensors are returned as NumPy arrays
in GGUF order (the reverse of ggml's ``ne``): a torch ``Linear`` weight ``[out, in]`` is ggml ``{in, out}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lilicorr.models.head import NUM_FEATURES, LiLiCorrHead

# The five per-candidate features, in the order the head's first Linear was trained on (head.py).
FEATURE_SET = "lp,p,lp_minus_max,rank_fraction,is_top1"
WALK = "greedy"  # llama.cpp verifies by sampling the target and matching, so a one-hot proposal is all it uses
FEATURE_NORM_EPS = 1e-5  # the head's LayerNorm over the 5 features (head.py)


@dataclass
class GGUFExtras:
    """Keys and tensors to append to the converter's DFlash GGUF; ``drop`` names converter tensors to replace."""

    keys: dict[str, tuple[str, object]] = field(default_factory=dict)  # name -> (type: u32|f32|str, value)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)
    # name -> {"gguf": path, "tensors": [candidates, first found wins], "ids": [row ids]}: rows copied raw
    # (quantized blocks included) from another GGUF, so a reduced head keeps the target's own numerics
    rows: dict[str, dict] = field(default_factory=dict)

    def merge(self, other: GGUFExtras) -> GGUFExtras:
        names = self.tensors.keys() | self.rows.keys()
        clash = (self.keys.keys() & other.keys.keys()) | (names & (other.tensors.keys() | other.rows.keys()))
        if clash:
            raise ValueError(f"GGUF extras written twice: {sorted(clash)}")
        return GGUFExtras(
            {**self.keys, **other.keys},
            {**self.tensors, **other.tensors},
            self.drop + other.drop,
            {**self.rows, **other.rows},
        )


def _f32(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy())


def _linear(out: dict[str, np.ndarray], name: str, mod: torch.nn.Linear) -> None:
    out[f"{name}.weight"] = _f32(mod.weight)
    if mod.bias is not None:
        out[f"{name}.bias"] = _f32(mod.bias)


def lattice_bias(head: LiLiCorrHead, slots: int) -> torch.Tensor:
    """The additive attention bias of a full ``slots``-slot lattice ``[heads, slots·K, slots·K]``.

    Written expanded (it is a pure function of ``relative_slot_bias`` and ``same_slot_bias``): llama.cpp
    then adds a ``[:n·K, :n·K]`` view for a shorter draft, which equals the head's own bias for ``n`` slots
    because the relative offset stays the trained ``B − 1``."""
    with torch.no_grad():
        return head.slot_bias(slots).float()


def lilicorr_extras(head: LiLiCorrHead, rms_norm_eps: float, hidden_size: int) -> GGUFExtras:
    """The head's ``lilicorr.*`` keys and F32 tensors (names: docs/guide/deploy-llamacpp.md)."""
    slots = head.block_size - 1
    width = head.pass_hidden_proj.out_features
    layer0 = head.layers[0]
    keys: dict[str, tuple[str, object]] = {
        "lilicorr.candidate_topk": ("u32", head.k),
        "lilicorr.hidden_size": ("u32", width),
        "lilicorr.num_layers": ("u32", len(head.layers)),
        "lilicorr.num_heads": ("u32", head.heads),
        "lilicorr.feed_forward_length": ("u32", layer0.mlp.up_proj.out_features),
        "lilicorr.factor_dim": ("u32", head.out_head.out_features),
        "lilicorr.vector_eps": ("f32", float(head.eps)),
        "lilicorr.logit_scale": ("f32", float(head.scale)),
        "lilicorr.rms_norm_eps": ("f32", float(rms_norm_eps)),
        "lilicorr.feature_norm_eps": ("f32", FEATURE_NORM_EPS),
        "lilicorr.feature_set": ("str", FEATURE_SET),
        "lilicorr.walk": ("str", WALK),
    }
    t: dict[str, np.ndarray] = {}
    if head.token_proj is not None:
        _linear(t, "lilicorr.token_proj", head.token_proj)
    elif width != hidden_size:
        raise ValueError(f"LiLiCorr head width {width} != hidden {hidden_size} but the head has no token_proj")
    _linear(t, "lilicorr.pass_proj", head.pass_hidden_proj)
    _linear(t, "lilicorr.ctx_proj", head.context_proj)
    t["lilicorr.feat_norm.weight"] = _f32(head.feature_norm.weight)
    t["lilicorr.feat_norm.bias"] = _f32(head.feature_norm.bias)
    _linear(t, "lilicorr.feat_up", head.feature_mlp.up_proj)
    _linear(t, "lilicorr.feat_down", head.feature_mlp.down_proj)
    t["lilicorr.slot_embd"] = _f32(head.slot_embedding.reshape(slots, width))
    t["lilicorr.rank_embd"] = _f32(head.rank_embedding.reshape(head.k, width))
    t["lilicorr.lattice_bias"] = _f32(lattice_bias(head, slots))
    # the lattice layers stacked on a last ggml axis (numpy axis 0): one tensor per kind, layer i a view
    stack: dict[str, list[torch.Tensor]] = {}
    for layer in head.layers:
        for name, value in (
            ("attn_norm.weight", layer.attn_norm.weight),
            ("attn_qkv.weight", layer.attn.in_proj_weight),
            ("attn_qkv.bias", layer.attn.in_proj_bias),
            ("attn_output.weight", layer.attn.out_proj.weight),
            ("attn_output.bias", layer.attn.out_proj.bias),
            ("ffn_norm.weight", layer.mlp_norm.weight),
            ("ffn_up.weight", layer.mlp.up_proj.weight),
            ("ffn_up.bias", layer.mlp.up_proj.bias),
            ("ffn_down.weight", layer.mlp.down_proj.weight),
            ("ffn_down.bias", layer.mlp.down_proj.bias),
        ):
            stack.setdefault(name, []).append(value)
    for name, values in stack.items():
        t[f"lilicorr.{name}"] = _f32(torch.stack(values))
    t["lilicorr.output_norm.weight"] = _f32(head.output_norm.weight)
    t["lilicorr.anchor_norm.weight"] = _f32(head.anchor_norm.weight)
    # factor_input_proj's column blocks [self | anchor | self ⊙ anchor], split as the engines apply them
    w = head.factor_input_proj.weight
    t["lilicorr.factor_self.weight"] = _f32(w[:, :width])
    t["lilicorr.factor_self.bias"] = _f32(head.factor_input_proj.bias)
    t["lilicorr.factor_anchor.weight"] = _f32(w[:, width : 2 * width])
    t["lilicorr.factor_cross.weight"] = _f32(w[:, 2 * width :])
    _linear(t, "lilicorr.out_head", head.out_head)
    _linear(t, "lilicorr.in_head", head.in_head)
    _linear(t, "lilicorr.anchor_out_head", head.anchor_out_head)
    if len(FEATURE_SET.split(",")) != NUM_FEATURES:
        raise AssertionError("FEATURE_SET out of step with the head's NUM_FEATURES")
    return GGUFExtras(keys, t)


def lattice_fits(hidden_size: int, k: int) -> bool:
    """llama.cpp packs one slot's lattice row (K ids + K×K scores) into one hidden-size output row."""
    return k + k * k <= hidden_size


def conv_extras(taps: int, group: int) -> GGUFExtras:
    """The convolution's keys; its tensors are the converter's ``blk.N.{attn,ffn}_conv_{base,proj}``."""
    return GGUFExtras({"dflash.conv_kernel_size": ("u32", taps), "dflash.conv_group_size": ("u32", group)})


def identity_conv_extras(n_layer: int, hidden: int, group: int) -> GGUFExtras:
    """A one-tap convolution that is the identity (base 1, projection 0): llama.cpp's DFlash2 loader requires
    a convolution beside the selector, and ``y = (1 + 0) ⊙ x`` is exact in floating point."""
    base = np.zeros((2, 1, hidden), dtype=np.float32)
    base[:, 0] = 1.0
    proj = np.zeros((2 * (hidden // group), hidden), dtype=np.float32)
    t: dict[str, np.ndarray] = {}
    for i in range(n_layer):
        for side in ("attn", "ffn"):
            t[f"blk.{i}.{side}_conv_base"] = base
            t[f"blk.{i}.{side}_conv_proj.weight"] = proj
    return GGUFExtras(conv_extras(1, group).keys, t)


def selector_extras(arm: torch.nn.Module) -> GGUFExtras:
    """Our ``dflash2`` arm as llama.cpp's DFlash2 selector: the same score
    ``unary[k] + ⟨E_pred[prev] ⊙ W_h h, E_succ[cand_k]⟩`` over the same top-K of the backbone's logits."""
    rank = arm.hidden_projection.out_features
    keys = {"dflash.selector_rank": ("u32", rank), "dflash.selector_top_k": ("u32", int(arm.k))}
    t = {
        "selector_hidden.weight": _f32(arm.hidden_projection.weight),
        "selector_predecessor.weight": _f32(arm.pred_embedding.weight),
        "selector_successor.weight": _f32(arm.succ_embedding.weight),
    }
    return GGUFExtras(keys, t)


def draft_vocab_ids(draft_dir: Path, size: int, vocab_size: int) -> torch.Tensor:
    """The ``size`` most frequent ids of the folder's ``draft_vocab.json`` (the file ``lilicorr data draft-vocab``
    writes; the engine reads the same first ``size`` ids), ascending as ``d2t`` wants them."""
    path = Path(draft_dir) / "draft_vocab.json"
    if not path.exists():
        raise ValueError(f"--draft-vocab {size}: {path} not found (make it with `lilicorr data draft-vocab`)")
    try:
        ids = json.loads(path.read_text())["token_ids"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: expected a JSON object with 'token_ids' ({e})") from e
    if not 1 <= size <= len(ids):
        raise ValueError(f"--draft-vocab {size}: {path} lists {len(ids)} token ids (expected 1..{len(ids)})")
    out = torch.tensor(ids[:size], dtype=torch.long)
    if int(out.min()) < 0 or int(out.max()) >= vocab_size or len(out.unique()) != size:
        raise ValueError(f"{path}: token ids must be distinct and in 0..{vocab_size - 1}")
    return out.sort().values


def draft_vocab_extras(ids: torch.Tensor, target_gguf: str) -> GGUFExtras:
    """``d2t`` (absolute target ids, I64, ascending) and ``output`` = those rows of the target GGUF's own LM
    head (``output.weight``, or ``token_embd.weight`` when tied), copied in its own type: llama.cpp then
    scores exactly what the full head would for those tokens and scatters them back with −inf elsewhere."""
    ids = ids.to(torch.int64)
    if ids.ndim != 1 or ids.numel() == 0 or not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError("draft vocabulary ids must be distinct and ascending")
    rows = {
        "output.weight": {"gguf": target_gguf, "tensors": ["output.weight", "token_embd.weight"], "ids": ids.tolist()}
    }
    return GGUFExtras({}, {"d2t": ids.cpu().numpy()}, drop=["output.weight"], rows=rows)
