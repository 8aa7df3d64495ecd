"""Draft-model configuration: the exact ``config.json`` fields vLLM and SGLang read, validated up front.

A wrong ``logit_scale`` or ``vector_eps`` loads silently in the engines and scores a different
function, so every field is checked here, before any weight is touched, and every error names the
field with the expected and the found value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LILICORR_ARCH = "LiLiCorrDraftModel"
DFLASH_ARCH = "DFlashDraftModel"
LILICORR_FIELDS = (
    "lilicorr_candidate_topk",
    "lilicorr_hidden_size",
    "lilicorr_num_layers",
    "lilicorr_num_heads",
    "lilicorr_mlp_ratio",
    "lilicorr_factor_dim",
    "lilicorr_vector_eps",
    "lilicorr_logit_scale",
)


class CheckpointError(ValueError):
    """A draft checkpoint that cannot be used; the message names the field or tensor."""


@dataclass
class LiLiCorrGeometry:
    """The eight ``dflash_config.lilicorr_*`` fields (no defaults in SGLang; we write all of them)."""

    candidate_topk: int = 8
    hidden_size: int = 0  # 0 means the draft hidden size
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: float = 2.0
    factor_dim: int = 128
    vector_eps: float = 1e-4
    logit_scale: float = 8.0

    def to_dflash_config(self) -> dict[str, Any]:
        return {
            "lilicorr_enabled": True,
            "lilicorr_candidate_topk": self.candidate_topk,
            "lilicorr_hidden_size": self.hidden_size,
            "lilicorr_num_layers": self.num_layers,
            "lilicorr_num_heads": self.num_heads,
            "lilicorr_mlp_ratio": self.mlp_ratio,
            "lilicorr_factor_dim": self.factor_dim,
            "lilicorr_vector_eps": self.vector_eps,
            "lilicorr_logit_scale": self.logit_scale,
        }


@dataclass
class DraftConfig:
    """Backbone + DFlash + optional LiLiCorr geometry of one draft checkpoint."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    block_size: int
    mask_token_id: int
    target_layer_ids: list[int]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    attention_bias: bool = False
    target_hidden_size: int | None = None  # defaults to hidden_size
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    has_own_lm_head: bool = False
    lilicorr: LiLiCorrGeometry | None = None
    num_target_layers: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return LILICORR_ARCH if self.lilicorr is not None else DFLASH_ARCH

    @property
    def head_width(self) -> int:
        assert self.lilicorr is not None
        return self.lilicorr.hidden_size or self.hidden_size

    @property
    def num_slots(self) -> int:
        return self.block_size - 1

    @property
    def fc_in_features(self) -> int:
        return len(self.target_layer_ids) * (self.target_hidden_size or self.hidden_size)

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        dflash: dict[str, Any] = {
            "block_size": self.block_size,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
        }
        if self.num_target_layers is not None:
            dflash["num_target_layers"] = self.num_target_layers
        if self.conv_kernel_size or self.conv_group_size:
            dflash["conv_kernel_size"] = self.conv_kernel_size
            dflash["conv_group_size"] = self.conv_group_size
        if self.lilicorr is not None:
            dflash["projector_type"] = "lilicorr"
            dflash.update(self.lilicorr.to_dflash_config())
        out: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "attention_bias": self.attention_bias,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": False,
            "block_size": self.block_size,
            "dflash_config": dflash,
            "torch_dtype": "bfloat16",
        }
        if self.target_hidden_size and self.target_hidden_size != self.hidden_size:
            out["target_hidden_size"] = self.target_hidden_size
        if self.has_own_lm_head:
            out["has_own_lm_head"] = True
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "config.json") -> DraftConfig:
        """Parse and validate; raises ``CheckpointError`` naming the first bad field."""
        archs = d.get("architectures")
        if not isinstance(archs, list) or not archs:
            raise CheckpointError(
                f"{where}: field 'architectures' missing (expected ['{LILICORR_ARCH}'] or ['{DFLASH_ARCH}'])"
            )
        arch = archs[0]
        if arch not in (LILICORR_ARCH, DFLASH_ARCH):
            raise CheckpointError(
                f"{where}: field 'architectures' = {archs}: expected ['{LILICORR_ARCH}'] or ['{DFLASH_ARCH}']"
            )
        dfc = d.get("dflash_config") or {}
        if not isinstance(dfc, dict):
            raise CheckpointError(f"{where}: field 'dflash_config' must be an object, found {type(dfc).__name__}")

        def need(key: str, src: dict, kind: type | tuple = int, label: str = "") -> Any:
            name = label or key
            if key not in src:
                raise CheckpointError(f"{where}: field '{name}' missing")
            val = src[key]
            if kind is int and (isinstance(val, bool) or not isinstance(val, int)):
                raise CheckpointError(f"{where}: field '{name}' must be an integer, found {val!r}")
            if kind is float and (isinstance(val, bool) or not isinstance(val, int | float)):
                raise CheckpointError(f"{where}: field '{name}' must be a number, found {val!r}")
            return val

        def positive(key: str, val: Any) -> None:
            if not val > 0:
                raise CheckpointError(f"{where}: field '{key}' must be > 0, found {val!r}")

        backbone = {
            k: need(k, d)
            for k in (
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "vocab_size",
            )
        }
        for k, v in backbone.items():
            positive(k, v)
        head_dim = d.get("head_dim") or backbone["hidden_size"] // backbone["num_attention_heads"]
        if backbone["num_attention_heads"] % backbone["num_key_value_heads"]:
            raise CheckpointError(
                f"{where}: field 'num_key_value_heads' = {backbone['num_key_value_heads']} must "
                f"divide num_attention_heads = {backbone['num_attention_heads']}"
            )
        block = dfc.get("block_size", d.get("block_size"))
        if block is None:
            raise CheckpointError(f"{where}: field 'dflash_config.block_size' missing (SGLang would assume 16)")
        if isinstance(block, bool) or not isinstance(block, int) or block < 2:
            raise CheckpointError(f"{where}: field 'dflash_config.block_size' must be an integer >= 2, found {block!r}")
        mask = need("mask_token_id", dfc, int, "dflash_config.mask_token_id")
        if not 0 <= mask < backbone["vocab_size"]:
            raise CheckpointError(
                f"{where}: field 'dflash_config.mask_token_id' = {mask} outside the vocabulary "
                f"[0, {backbone['vocab_size']})"
            )
        layer_ids = dfc.get("target_layer_ids")
        if (
            not isinstance(layer_ids, list)
            or not layer_ids
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layer_ids)
        ):
            raise CheckpointError(
                f"{where}: field 'dflash_config.target_layer_ids' must be a non-empty list of "
                f"non-negative integers, found {layer_ids!r}"
            )
        conv_t = dfc.get("conv_kernel_size", 0) or 0
        conv_g = dfc.get("conv_group_size", 0) or 0
        for key, val in (("conv_kernel_size", conv_t), ("conv_group_size", conv_g)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                raise CheckpointError(
                    f"{where}: field 'dflash_config.{key}' must be a non-negative integer, found {val!r}"
                )
        if (conv_t > 0) != (conv_g > 0):
            raise CheckpointError(
                f"{where}: fields 'dflash_config.conv_kernel_size' = {conv_t} and "
                f"'conv_group_size' = {conv_g}: set both or neither"
            )
        if conv_g and backbone["hidden_size"] % conv_g:
            raise CheckpointError(
                f"{where}: field 'dflash_config.conv_group_size' = {conv_g} must divide "
                f"hidden_size = {backbone['hidden_size']}"
            )
        if dfc.get("sample_from_anchor"):
            raise CheckpointError(f"{where}: field 'dflash_config.sample_from_anchor' = true is not supported")
        geometry = None
        if arch == LILICORR_ARCH:
            geometry = _parse_geometry(dfc, backbone["hidden_size"], where)
        known = {
            "architectures",
            "model_type",
            "head_dim",
            "hidden_act",
            "rms_norm_eps",
            "rope_theta",
            "max_position_embeddings",
            "attention_bias",
            "tie_word_embeddings",
            "block_size",
            "dflash_config",
            "torch_dtype",
            "dtype",
            "target_hidden_size",
            "has_own_lm_head",
            "num_target_layers",
            *backbone,
        }
        return cls(
            **backbone,
            head_dim=int(head_dim),
            block_size=block,
            mask_token_id=mask,
            target_layer_ids=list(layer_ids),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(d.get("rope_theta", (d.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
            max_position_embeddings=int(d.get("max_position_embeddings", 8192)),
            attention_bias=bool(d.get("attention_bias", False)),
            target_hidden_size=d.get("target_hidden_size"),
            conv_kernel_size=conv_t,
            conv_group_size=conv_g,
            has_own_lm_head=bool(d.get("has_own_lm_head", False)),
            lilicorr=geometry,
            num_target_layers=dfc.get("num_target_layers", d.get("num_target_layers")),
            extra={k: v for k, v in d.items() if k not in known and k != "rope_parameters"},
        )


def _parse_geometry(dfc: dict, draft_hidden: int, where: str) -> LiLiCorrGeometry:
    if dfc.get("lilicorr_enabled", True) is not True:
        raise CheckpointError(
            f"{where}: field 'dflash_config.lilicorr_enabled' = {dfc.get('lilicorr_enabled')!r}:"
            " LiLiCorrDraftModel requires true"
        )
    for key in LILICORR_FIELDS:
        if key not in dfc:
            raise CheckpointError(f"{where}: field 'dflash_config.{key}' missing (required by SGLang and vLLM)")
    ints = (
        "lilicorr_candidate_topk",
        "lilicorr_hidden_size",
        "lilicorr_num_layers",
        "lilicorr_num_heads",
        "lilicorr_factor_dim",
    )
    for key in ints:
        v = dfc[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise CheckpointError(f"{where}: field 'dflash_config.{key}' must be an integer, found {v!r}")
    for key in ("lilicorr_mlp_ratio", "lilicorr_vector_eps", "lilicorr_logit_scale"):
        v = dfc[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise CheckpointError(f"{where}: field 'dflash_config.{key}' must be a number, found {v!r}")
    k = dfc["lilicorr_candidate_topk"]
    if k < 1 or k > 16 or k & (k - 1):
        raise CheckpointError(
            f"{where}: field 'dflash_config.lilicorr_candidate_topk' = {k}: expected a power of two in 1..16"
        )
    if dfc["lilicorr_hidden_size"] < 0:
        raise CheckpointError(
            f"{where}: field 'dflash_config.lilicorr_hidden_size' = {dfc['lilicorr_hidden_size']}:"
            " expected >= 0 (0 means the draft hidden size)"
        )
    for key in (
        "lilicorr_num_layers",
        "lilicorr_num_heads",
        "lilicorr_factor_dim",
        "lilicorr_mlp_ratio",
        "lilicorr_logit_scale",
    ):
        if not dfc[key] > 0:
            raise CheckpointError(f"{where}: field 'dflash_config.{key}' = {dfc[key]!r}: expected > 0")
    eps = dfc["lilicorr_vector_eps"]
    if not 0 < eps < 0.5:
        raise CheckpointError(f"{where}: field 'dflash_config.lilicorr_vector_eps' = {eps!r}: expected in (0, 0.5)")
    width = dfc["lilicorr_hidden_size"] or draft_hidden
    if width % dfc["lilicorr_num_heads"]:
        raise CheckpointError(
            f"{where}: field 'dflash_config.lilicorr_num_heads' = {dfc['lilicorr_num_heads']} "
            f"must divide the head width {width}"
        )
    if int(width * dfc["lilicorr_mlp_ratio"]) < 1:
        raise CheckpointError(
            f"{where}: field 'dflash_config.lilicorr_mlp_ratio' = {dfc['lilicorr_mlp_ratio']} "
            f"gives an empty MLP for head width {width}"
        )
    return LiLiCorrGeometry(
        candidate_topk=k,
        hidden_size=dfc["lilicorr_hidden_size"],
        num_layers=dfc["lilicorr_num_layers"],
        num_heads=dfc["lilicorr_num_heads"],
        mlp_ratio=float(dfc["lilicorr_mlp_ratio"]),
        factor_dim=dfc["lilicorr_factor_dim"],
        vector_eps=float(eps),
        logit_scale=float(dfc["lilicorr_logit_scale"]),
    )
