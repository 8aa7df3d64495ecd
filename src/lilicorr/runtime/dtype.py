"""Which dtype a target runs in: ``--dtype auto`` picks bf16 only where this machine multiplies it natively."""

from __future__ import annotations

from pathlib import Path

import torch

from lilicorr.runtime.folder import TargetError


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively: AMX-bf16 (Intel Xeon) or AVX512-BF16 (AMD Zen 4 and later,
    some Intel). Measured on this project's machines: bf16 runs the shipped speculative default 1.36× faster
    than plain fp32 decoding on a 2-core AMD EPYC with AVX512-BF16 (fp32 there: 0.96×, plain bf16 ≈ plain fp32;
    ``benchmarks/dtype_choice.py``, docs/results/smollm2-defaults.md) and is faster on AMX; on AMD CPUs
    without either, bf16 is 1.4–9× slower (docs/guide/usage.md, dtype)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_dtype(name: str) -> torch.dtype:
    """``auto``: bf16 on CUDA or on a CPU with native bf16 (AMX-bf16 or AVX512-BF16), else fp32; or an explicit
    float32 / bfloat16."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() or cpu_has_fast_bf16() else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise TargetError(f"dtype {name!r}: expected auto, float32, bfloat16 or float16")
    return table[name]
