"""Quantized draft checkpoints: NVFP4 (ModelOpt layout) and int8 W8A8 (compressed-tensors).

Why these two: vLLM loads LiLiCorr drafters quantized by ModelOpt (NVFP4) for GPUs, and int8 W8A8 in
the compressed-tensors format is what CPUs run fast (``torch._int_mm``). Both formats carry an
exclusion list, and the LiLiCorr head has modules that every engine reads as plain float tensors
(split, fused or used through ``F.linear`` after load — docs/guide/head.md): the lattice attention's
``in_proj``, ``factor_input_proj``, ``out_head``, ``in_head``, the five-feature MLP and its norm, plus
all embeddings, norms and biases. Quantizing one of them silently breaks the head in the serving
engine, so the exporter never does, lists them all as excluded, and the loader refuses, naming the
module, a checkpoint that quantizes one or whose exclusion list misses one.

NVFP4 (group 16): ``weight`` uint8 ``[out, in/2]`` (two e2m1 codes per byte, low nibble first),
``weight_scale`` float8_e4m3 ``[out, in/16]``, ``weight_scale_2`` fp32 scalar; weight-only
(``W4A16_NVFP4``: no ``input_scale``, activations stay bf16), since a static activation scale needs
calibration data the exporter does not have. int8: ``weight`` int8 ``[out, in]`` symmetric per
output channel, ``weight_scale`` ``[out, 1]``; activations quantized per token at run time.
"""

from __future__ import annotations

import fnmatch

import torch
from torch import nn

from lilicorr.models.config import CheckpointError
from lilicorr.models.head import FLOAT_ONLY_MODULES

SCHEMES = ("nvfp4", "int8")
NVFP4_GROUP = 16
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FP8_E4M3_MAX = 448.0

# Module families that stay floating point besides FLOAT_ONLY_MODULES (patterns over module names).
_ALWAYS_FLOAT = ("lilicorr.feature_mlp*", "lilicorr.feature_norm", "lm_head")


def must_stay_float(module: str) -> bool:
    """Whether a module (Scheme A name, e.g. ``lilicorr.out_head``) must never be quantized."""
    if any(module == m or module.startswith(m + ".") or fnmatch.fnmatch(module, m) for m in FLOAT_ONLY_MODULES):
        return True
    if ".attn" in module and module.startswith("lilicorr.layers."):  # in_proj_weight / in_proj_bias
        return not module.endswith("out_proj")
    return any(fnmatch.fnmatch(module, p) for p in _ALWAYS_FLOAT)


def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


def float_modules(model: nn.Module) -> list[str]:
    """The exclusion list written with a quantized export: every weight-bearing module kept in float."""
    names = [n for n in linear_modules(model) if must_stay_float(n)]
    # the lattice attention's raw in_proj parameters: named "…attn.in_proj", never "…attn", because vLLM
    # also matches exclusions as substrings and "…attn" would exclude the quantizable attn.out_proj
    names += [f"{n}.in_proj" for n, m in model.named_modules() if n.endswith(".attn") and hasattr(m, "in_proj_weight")]
    names += [n for n, _ in model.named_modules() if n == "lilicorr.feature_norm"]
    return sorted(set(names) | {"lm_head"})


# -- NVFP4 ---------------------------------------------------------------------------------------
def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``w [out, in]`` → (packed uint8 ``[out, in/2]``, block scales fp8 ``[out, in/16]``, global fp32 scalar)."""
    out_f, in_f = w.shape
    if in_f % NVFP4_GROUP:
        raise ValueError(f"NVFP4 needs in_features divisible by {NVFP4_GROUP}, got {in_f}")
    w = w.float()
    blocks = w.view(out_f, in_f // NVFP4_GROUP, NVFP4_GROUP)  # [out, G, 16]
    amax = blocks.abs().amax(-1)  # [out, G]
    global_scale = (w.abs().max() / (6.0 * FP8_E4M3_MAX)).clamp_min(1e-12)
    scale = (amax / 6.0 / global_scale).clamp(max=FP8_E4M3_MAX).to(torch.float8_e4m3fn)  # [out, G]
    eff = scale.float() * global_scale  # [out, G]
    x = blocks / eff[..., None].clamp_min(1e-30)
    mags = E2M1_VALUES.to(x.device)
    code = (x.abs()[..., None] - mags).abs().argmin(-1)  # nearest e2m1 magnitude, [out, G, 16]
    code = code | ((x < 0) & (code > 0)).to(code.dtype) << 3
    code = code.view(out_f, in_f).to(torch.uint8)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.contiguous(), scale.contiguous(), global_scale.reshape(()).float()


def dequantize_nvfp4(packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    out_f = packed.shape[0]
    codes = torch.stack([packed & 0x0F, packed >> 4], -1).view(out_f, -1).long()  # low nibble first
    vals = E2M1_VALUES.to(packed.device)[codes & 0x7] * torch.where(codes & 0x8 > 0, -1.0, 1.0)
    eff = scale.float() * global_scale.float()  # [out, G]
    return (vals.view(out_f, -1, NVFP4_GROUP) * eff[..., None]).view(out_f, -1)


# -- int8 W8A8 -----------------------------------------------------------------------------------
def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: (weight int8 ``[out, in]``, scale fp32 ``[out, 1]``)."""
    scale = (w.float().abs().amax(-1, keepdim=True) / 127.0).clamp_min(1e-12)
    q = torch.round(w.float() / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """W8A8 linear for the CPU: activations quantized per token at run time, ``torch._int_mm``, rescaled."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight_t", weight.t().contiguous())  # [in, out] int8
        self.register_buffer("scale", scale.float().view(1, -1))  # [1, out]
        self.register_buffer("bias", bias.float() if bias is not None else None)
        self.out_dtype = out_dtype
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1]).float()  # [tokens, in]
        xs = (xf.abs().amax(-1, keepdim=True) / 127.0).clamp_min(1e-12)  # per-token scale
        xq = torch.round(xf / xs).clamp(-127, 127).to(torch.int8)
        rows = xq.shape[0]
        if rows <= 16:  # torch._int_mm wants more than 16 rows: pad a short batch (one drafted block)
            xq = torch.cat([xq, xq.new_zeros(17 - rows, xq.shape[1])])
        y = torch._int_mm(xq, self.weight_t)[:rows].float() * xs * self.scale
        if self.bias is not None:
            y = y + self.bias
        return y.to(self.out_dtype).view(*shape[:-1], self.out_features)


# -- config ----------------------------------------------------------------------------------------
def quantization_config(scheme: str, exclude: list[str]) -> dict:
    if scheme == "nvfp4":
        return {
            "quant_method": "modelopt",
            "producer": {"name": "lilicorr"},
            "quantization": {
                "quant_algo": "W4A16_NVFP4",
                "kv_cache_quant_algo": None,
                "group_size": NVFP4_GROUP,
                "exclude_modules": exclude,
            },
        }
    if scheme == "int8":
        return {
            "quant_method": "compressed-tensors",
            "format": "int-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 8,
                        "type": "int",
                        "symmetric": True,
                        "strategy": "channel",
                        "dynamic": False,
                        "group_size": None,
                        "observer": "minmax",
                    },
                    "input_activations": {
                        "num_bits": 8,
                        "type": "int",
                        "symmetric": True,
                        "strategy": "token",
                        "dynamic": True,
                        "observer": None,
                    },
                    "output_activations": None,
                }
            },
            "ignore": exclude,
            "kv_cache_scheme": None,
        }
    raise ValueError(f"quantization {scheme!r}: expected one of {SCHEMES}")


def scheme_of(qc: dict | None, where: str) -> tuple[str | None, list[str]]:
    """(scheme, exclusion list) of a checkpoint's ``quantization_config``; (None, []) if unquantized."""
    if not qc:
        return None, []
    method = qc.get("quant_method")
    if method == "modelopt":
        q = qc.get("quantization") or qc
        algo = str(q.get("quant_algo", "")).upper()
        if "NVFP4" not in algo:
            raise CheckpointError(f"{where}: quantization_config quant_algo {algo!r}: only NVFP4 is supported")
        return "nvfp4", list(q.get("exclude_modules", q.get("ignore", [])))
    if method == "compressed-tensors":
        groups = list((qc.get("config_groups") or {}).values())
        if len(groups) != 1 or (groups[0].get("weights") or {}).get("num_bits") != 8:
            raise CheckpointError(f"{where}: compressed-tensors config: only one int8 weight group is supported")
        return "int8", list(qc.get("ignore", []))
    raise CheckpointError(
        f"{where}: quantization_config.quant_method {method!r}: "
        "expected 'modelopt' (NVFP4) or 'compressed-tensors' (int8)"
    )


def check_exclusions(model: nn.Module, exclude: list[str], where: str) -> None:
    """Every module that must stay float is named by the exclusion list (exactly or by a wildcard)."""

    def covered(name: str) -> bool:
        return any(name == e or fnmatch.fnmatch(name, e) or name.startswith(e + ".") for e in exclude)

    missing = [n for n in float_modules(model) if n != "lm_head" and not covered(n)]
    if missing:
        raise CheckpointError(
            f"{where}: quantization exclusion list misses float-only module(s) {missing[:6]} "
            f"(these are read as float tensors by vLLM/SGLang and must be excluded)"
        )
