"""Frozen linear layers on the CPU with their weights pre-packed for oneDNN, once, instead of at every call.

Why: at inference every ``nn.Linear`` of the target and the drafter runs ``F.linear``, which hands oneDNN (bf16)
or MKL (fp32) the weight in its stored layout; the kernel then re-lays it out or reads it in a cache-unfriendly
order on every call. Measured on the 2-core AMD EPYC (Zen 5) with SmolLM2-135M shapes (576 × 1 536), one row:
bf16 75–105 µs against 50 µs pre-packed; fp32 212 µs against 98 µs (``python benchmarks/packed_linear.py``, which
also times whole target forwards). Pre-packing is what ``torch.compile`` with ``freezing`` does for linears on the
CPU (its ``mkldnn._linear_pointwise`` lowering), without the compile time (231 s for SmolLM2 here) or its
recompiles on every new cache length.

What stays the same: the module is still the ``nn.Linear`` it was (its ``weight`` is the parameter the rest of the
code reads, shares and saves); only its ``forward`` is routed to the packed copy, which costs one more copy of
the weights in memory. A packed layer falls back to ``F.linear`` whenever the packed copy could be wrong or cannot
serve: autograd wants gradients or autocast is on (training: autocast picks the dtype), the weight was changed in
place (its version counter moved), replaced or moved off the CPU since it was packed, or the input's dtype is not
the weight's. Whether to pack is decided here once:
``LILICORR_PACKED_LINEAR=0`` turns it off (for A/B timing); a torch without the kernels, or a probe whose result
differs from ``F.linear`` beyond rounding, leaves every layer as it was.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from lilicorr.runtime.switches import switch_on

ENV = "LILICORR_PACKED_LINEAR"
DTYPES = (torch.float32, torch.bfloat16)
_PROBE: dict[torch.dtype, bool] = {}  # dtype → the kernels exist and agree with F.linear here


def _kernels() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return (
        torch.backends.mkldnn.is_available()
        and ops is not None
        and hasattr(ops, "_reorder_linear_weight")
        and hasattr(ops, "_linear_pointwise")
    )


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)  # batch hint 1: decoding's common case


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out: int) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])  # [rows, in]
    y = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")  # [rows, out]
    return y.reshape(*x.shape[:-1], out)


def kernels_agree(dtype: torch.dtype) -> bool:
    """Whether this torch has the packed kernels and they give ``F.linear``'s result for ``dtype`` (to rounding:
    a kernel may sum in another order), probed once per dtype on a random layer at several row counts."""
    if dtype not in _PROBE:
        ok = dtype in DTYPES and _kernels()
        if ok:
            g = torch.Generator().manual_seed(0)
            w = torch.randn(96, 64, generator=g).to(dtype)
            b = torch.randn(96, generator=g).to(dtype)
            try:
                packed = pack_weight(w)
                for rows in (1, 5, 33):
                    x = torch.randn(rows, 64, generator=g).to(dtype)
                    ref, got = F.linear(x, w, b).float(), packed_matmul(x, packed, b, 96).float()
                    tol = 1e-4 if dtype == torch.float32 else 5e-2
                    ok = ok and got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=tol, atol=tol))
            except RuntimeError:  # a build whose oneDNN cannot pack this dtype
                ok = False
        _PROBE[dtype] = ok
    return _PROBE[dtype]


def enabled() -> bool:
    """The switch for A/B timing: on unless ``LILICORR_PACKED_LINEAR`` is ``0``."""
    return switch_on(ENV)


def weight_key(w: torch.Tensor) -> tuple[int, int]:
    """What identifies a tensor a packed copy was made from: its storage (a parameter replaced) and its version
    counter (one changed in place)."""
    return w.data_ptr(), w._version


def weight_versions(module: nn.Linear) -> tuple[int, int, int, int]:
    """``weight_key`` of the weight and of the bias (-1, -1 without one)."""
    bias = module.bias
    return *weight_key(module.weight), *((-1, -1) if bias is None else weight_key(bias))


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    # The parameters are read from their dict: ``self.weight`` goes through nn.Module's ``__getattr__`` after a
    # failed lookup (≈ 1 µs), and a step calls some hundreds of these layers.
    w, bias = self._parameters["weight"], self._parameters["bias"]
    stale = weight_key(w) != self._packed_key or w.device.type != "cpu"
    stale = stale or (bias is not None and weight_versions(self) != self._packed_version)
    wants_grad = torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)
    if stale or wants_grad or x.dtype != w.dtype or torch.is_autocast_enabled("cpu"):
        return F.linear(x, w, bias)
    return packed_matmul(x, self._packed_weight, self._packed_bias, self.out_features)


def pack_linears(model: nn.Module) -> int:
    """Route every frozen-use ``nn.Linear`` of ``model`` on the CPU through a pre-packed copy of its weight;
    returns how many layers were packed (0 when switched off or when the kernels are missing or disagree).
    Call it on models used for inference only; a layer packed twice is repacked."""
    if not enabled():
        return 0
    packed = 0
    for module in model.modules():
        if type(module) is not nn.Linear:  # subclasses (quantized layers) keep their own forward
            continue
        w = module.weight
        if w.device.type != "cpu" or w.dtype not in DTYPES or not kernels_agree(w.dtype):
            continue
        module._packed_weight = pack_weight(w)
        module._packed_bias = None if module.bias is None else module.bias.detach()
        module._packed_version = weight_versions(module)
        module._packed_key = weight_key(w)
        module.forward = types.MethodType(_forward, module)
        packed += 1
    return packed
