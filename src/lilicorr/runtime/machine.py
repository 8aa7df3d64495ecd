"""What this machine is, as far as a measured figure depends on it.

``lilicorr env`` prints it and every benchmark result records it, so a speed-up can always be traced to the CPU,
its bf16 support, the thread count and the OpenMP wait policy it was measured under (figures differ several-fold
between this project's Intel-AMX and AMD machines). One function, so the two never describe a machine differently.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

from lilicorr.runtime import int4_linear, packed_linear, threads
from lilicorr.runtime.dtype import cpu_has_fast_bf16


def _cpuinfo_field(key: str) -> str | None:
    """The value of the first ``key : value`` line of /proc/cpuinfo, or None (no such file or line)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    pairs = (ln.split(":", 1) for ln in lines if ":" in ln)
    return next((v.strip() for k, v in pairs if k.strip() == key), None)  # exact key: "model" ≠ "model name"


def _bf16_flags() -> list[str]:
    """The CPU's bf16 and AMX flags (``avx512_bf16``, ``amx_bf16``, …)."""
    return sorted(f for f in (_cpuinfo_field("flags") or "").split() if "bf16" in f or f.startswith("amx"))


def _vector_isa() -> str:
    """The widest x86 vector extension: ``avx512f``, ``avx2``, ``avx`` or ``none`` — the model name alone does not
    tell this project's machines apart ("AMD EPYC" has been both a Zen 1 with AVX2 only and a Zen 4 with
    AVX512-BF16, several-fold apart in matmul speed)."""
    flags = set((_cpuinfo_field("flags") or "").split())
    return next((f for f in ("avx512f", "avx2", "avx") if f in flags), "none")


def _packed_dtypes() -> list[str]:
    """The dtypes whose CPU linear layers run pre-packed here: none when switched off or without the kernels, so a
    figure taken with ``LILICORR_PACKED_LINEAR=0`` says so."""
    if not packed_linear.enabled():
        return []
    return [str(d).removeprefix("torch.") for d in packed_linear.DTYPES if packed_linear.kernels_agree(d)]


def _int4_dtypes() -> list[str]:
    """The dtypes in which a target imported from a 4-bit GGUF runs its projections on the int4 kernel here, up to
    how many rows: none when switched off (``LILICORR_INT4=0``) or without the kernel."""
    if not int4_linear.enabled() or int4_linear.max_rows() <= 0:
        return []
    rows = int4_linear.max_rows()
    return [f"{str(d).removeprefix('torch.')}<={rows}" for d in int4_linear.DTYPES if int4_linear.kernel_agrees(d)]


def _one_thread_passes() -> str | None:
    """The target passes that run on one torch thread under this process's OpenMP settings, None when none do."""
    if not threads.one_thread_for(1, 1):
        return None
    return f"<={threads.SMALL_BATCH} rows, <={threads.SMALL_TOKENS} tokens"


def machine_info(with_time: bool = False) -> dict:
    """Versions, threads, OpenMP policy, CPU model, cores, the CPU's bf16 flags, whether ``--dtype auto`` picks
    bf16 here (``fast_bf16``), which dtypes run pre-packed linears and which the int4 kernel of a 4-bit target, and
    which target passes run on one thread; ``with_time`` adds the UTC time of the call (a benchmark's timestamp)."""
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
        "cpu": _cpuinfo_field("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{_cpuinfo_field('cpu family')}/{_cpuinfo_field('model')}",
        "vector_isa": _vector_isa(),
        "cores": os.cpu_count(),
        "bf16_flags": _bf16_flags(),
        "fast_bf16": cpu_has_fast_bf16(),  # AMX-bf16 or AVX512-BF16: what --dtype auto reads
        "cuda": torch.cuda.is_available(),
        "packed_linear": _packed_dtypes(),  # dtypes whose CPU linears run pre-packed (runtime/packed_linear.py)
        "int4_target": _int4_dtypes(),  # dtype<=rows: a 4-bit GGUF target's projections (runtime/int4_linear.py)
        "one_thread_passes": _one_thread_passes(),  # target passes run on one thread here (runtime/threads.py)
    }
    if with_time:
        info["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return info


def bf16_label() -> str:
    """A short human line for cards and printouts: which native bf16 this CPU has, if any."""
    flags = _bf16_flags()
    if "amx_bf16" in flags:
        return "native bf16: AMX-bf16"
    if "avx512_bf16" in flags:
        return "native bf16: AVX512-BF16"
    return "native bf16: none"
