"""A target imported from a 4-bit GGUF runs its projections on those 4-bit weights, as llama.cpp does.

Why: the default target reaches this machine as a Q4_1 GGUF and is imported dequantized (``runtime/gguf_import.py``),
so every projection weight of its folder is exactly ``q · d + m``, with q ∈ 0…15 and an fp16 ``d`` and ``m`` per
32 inputs. torch's CPU int4 kernel (``aten._weight_int4pack_mm_for_cpu``, which computes ``(q − 8) · scale +
zero`` per group of 32) holds such a layer in a quarter of bf16's bytes. Measured on the 2-core AMD EPYC (Zen 5),
SmolLM2-135M in bf16, whole target forwards after a 120-token prompt (``python benchmarks/int4_target.py``): a
one-token step 1.4× faster than the packed bf16 layers, 5 rows 1.1×, 9 rows 1.04×, 13 rows 1.0×, but 17 rows 0.9×
and 33 rows 0.8× — the kernel's work grows with the rows where oneDNN's barely does, so wide verify passes and
prefills keep the packed bf16 copy (``runtime/packed_linear.py``). A layer therefore takes the int4 kernel up to
``MAX_ROWS`` rows and its previous forward above.

Faithful, not bit-exact: the weights are recovered from the folder's stored values and checked bit for bit
(a layer whose weights are not exactly on such a grid — any other folder — is left as it was), but for bf16
inputs the kernel wants bf16 scales, which round ``d`` and ``m + 8d`` as bf16 weights round each weight. Against
the fp32 target the two stay nearly as close (``benchmarks/int4_target.py --accuracy``, 2 793 ShareGPT positions:
top-1 96.5 % against 96.8 %, KL 1.63e-3 against 1.51e-3 a position). Only bf16: with fp32 inputs the kernel ran a
SmolLM2 layer 13–37× slower than ``F.linear`` here (``--fp32-layer``). The plain and the
speculative engine share the runtime, so both get it; ``LILICORR_INT4=0`` switches it off (A/B timing), and
``LILICORR_INT4_MAX_ROWS`` moves the cut-over.

Projections that read the same input in one forward (``SIBLINGS``: a layer's q, k and v; its gate and up) can share
one product over their weights stacked (``Siblings``): the first of them to be called computes all of their outputs
and the others take theirs, provided they are called with that very tensor, unchanged. Each output column is the
same dot product either way, and the kernel gives the same bits (tested). It pays only where each call wakes
OpenMP's sleeping second thread — fewer, wider calls wake it less often — so it runs only with the server's wait
(``OMP_WAIT_POLICY=PASSIVE``, no spin) on more than one thread. Per layer of SmolLM2 (``OMP_WAIT_POLICY=PASSIVE python
benchmarks/int4_siblings.py``, 2-core Zen 4, session 44), one call each against one shared: two sleeping threads q, k,
v 170 → 79 µs at one row, 181 → 119 at four, 284 → 141 at twelve; gate and up 171 → 121, 205 → 150, 377 → 324. On
one thread 1.00–1.15× per layer, which the extra bookkeeping ate in whole passes (one and two rows 0.9–1.0×); under
bench's spin 0.6–1.8×, level in whole passes. Whole passes on two sleeping threads are noisy here (±10 ms between
runs): ``benchmarks/runtime_step.py``, alternated with the commit before, seven runs each over three sittings, means
8 rows 59.7 → 52.2 ms, 12 rows (two runs) 64.2 → 57.9, 3–6 rows level (4 rows 45.0 → 44.7). The shared copies
cost memory: SmolLM2 in bf16 loads at 1 059 MB resident against 991 MB without them.
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lilicorr.runtime.packed_linear import weight_key, weight_versions
from lilicorr.runtime.switches import switch_on
from lilicorr.runtime.threads import sleeping_openmp

ENV = "LILICORR_INT4"
ROWS_ENV = "LILICORR_INT4_MAX_ROWS"
MAX_ROWS = 12  # the cut-over measured above (13 rows 1.0×, 17 rows 0.9×)
GROUP = 32  # inputs per scale: Q4_1's and Q4_K's block
DTYPES = (torch.bfloat16,)
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # names that read one input in one forward
_PROBE: dict[torch.dtype, bool] = {}


def enabled() -> bool:
    """On unless ``LILICORR_INT4`` is ``0``."""
    return switch_on(ENV)


def max_rows() -> int:
    raw = os.environ.get(ROWS_ENV, "").strip()
    if not raw:
        return MAX_ROWS
    try:
        return int(raw)
    except ValueError as e:
        raise ValueError(f"{ROWS_ENV}={raw!r}: expected an integer number of rows") from e


def recover_grid(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(q [out, in] int32 in 0…15, d, m [out, in / 32] fp32)`` with ``weight == q · d + m`` bit for bit (fp32,
    ``d`` and ``m`` fp16 values, as GGUF stores them), or None when ``weight`` is not on such a grid."""
    if weight.dim() != 2 or weight.shape[1] % GROUP or weight.dtype != torch.float32:
        return None
    out, inp = weight.shape
    g = weight.detach().view(out, inp // GROUP, GROUP)  # [out, groups, 32]
    lo, hi = g.amin(-1), g.amax(-1)  # [out, groups]: q = 0 and q = 15 (the quantizer spans the group)
    d, m = ((hi - lo) / 15).half().float(), lo.half().float()
    if not (torch.isfinite(d).all() and torch.isfinite(m).all()):
        return None
    q = ((g - m[..., None]) / d.clamp_min(torch.finfo(torch.float32).tiny)[..., None]).round().clamp(0, 15)
    if not torch.equal(q * d[..., None] + m[..., None], g):
        return None
    return q.view(out, inp).to(torch.int32), d, m


def pack_grid(
    q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's operands: the packed weight and ``[groups, out, 2]`` (scale, zero) with ``w = (q − 8) · scale
    + zero``."""
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    scales = torch.stack([d, m + 8 * d], -1).transpose(0, 1).contiguous().to(dtype)  # [groups, out, 2]
    return packed, scales


def int4_matmul(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, out: int) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])  # [rows, in]
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, packed, GROUP, scales)  # [rows, out]
    return y.reshape(*x.shape[:-1], out)


def kernel_agrees(dtype: torch.dtype) -> bool:
    """Whether this torch has the int4 kernels and they give ``F.linear``'s result on the dequantized weights for
    ``dtype`` (to its rounding), probed once on a random grid at several row counts."""
    if dtype not in _PROBE:
        ok = dtype in DTYPES and all(
            hasattr(torch.ops.aten, op) for op in ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu")
        )
        if ok:
            gen = torch.Generator().manual_seed(0)
            q = torch.randint(0, 16, (64, 128), generator=gen, dtype=torch.int32)
            d = (torch.rand(64, 4, generator=gen) * 0.01 + 0.001).to(dtype).float()
            m = (-torch.rand(64, 4, generator=gen) * 0.05).to(dtype).float()
            w = (q.view(64, 4, GROUP) * d[..., None] + m[..., None]).view(64, 128)
            try:
                packed, scales = pack_grid(q, d, m, dtype)
                for rows in (1, 5, 33):
                    x = torch.randn(rows, 128, generator=gen).to(dtype)
                    ref, got = F.linear(x.float(), w), int4_matmul(x, packed, scales, 64).float()
                    ok = ok and got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=3e-2, atol=3e-2))
            except RuntimeError:  # a build whose int4 kernel is missing for this CPU or dtype
                ok = False
        _PROBE[dtype] = ok
    return _PROBE[dtype]


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    # Every projection of every step passes here (210 calls a SmolLM2 step), so the checks read the parameters
    # from their dict: ``self.weight`` goes through nn.Module's ``__getattr__`` after a failed lookup, ≈ 1 µs each.
    if x.numel() > self._int4_numel:  # a wide pass: the packed copy, which checks its own weight
        return self._int4_fallback(x)
    w, bias = self._parameters["weight"], self._parameters["bias"]
    stale = weight_key(w) != self._int4_weight_key or w.device.type != "cpu"
    stale = stale or (bias is not None and weight_versions(self) != self._int4_version)
    wants_grad = torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)
    if stale or wants_grad or x.dtype != self._int4_dtype or torch.is_autocast_enabled("cpu"):
        return self._int4_fallback(x)
    siblings = self._int4_siblings
    if siblings is not None and siblings.pays and torch.get_num_threads() > 1:
        y = siblings.output(self._int4_slot, x)
    else:
        y = int4_matmul(x, self._int4_weight, self._int4_scales, self.out_features)
    return y if bias is None else y + bias


class Siblings:
    """One int4 product for projections that read the same input: the call that finds no outputs waiting for its
    input computes every sibling's and keeps the others' for that tensor (per thread, until taken)."""

    def __init__(self, grids: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], dtype: torch.dtype) -> None:
        q, d, m = (torch.cat(parts) for parts in zip(*grids, strict=True))  # stacked along the outputs
        self.weight, self.scales = pack_grid(q, d, m, dtype)
        self.sizes = [g[0].shape[0] for g in grids]
        self.pays = sleeping_openmp()  # measured faster only there (module docstring); libgomp reads it once
        self._waiting = threading.local()  # .input, .version, .outputs: outputs computed and not yet taken

    def output(self, slot: int, x: torch.Tensor) -> torch.Tensor:
        w = self._waiting
        outputs = getattr(w, "outputs", None)
        version = -1 if x.is_inference() else x._version  # inference tensors keep no version counter
        if outputs is None or w.input is not x or w.version != version or outputs[slot] is None:
            full = int4_matmul(x, self.weight, self.scales, sum(self.sizes))  # [..., Σ out]
            outputs = [part.contiguous() for part in full.split(self.sizes, -1)]
            w.input, w.version, w.outputs = x, version, outputs
        y, outputs[slot] = outputs[slot], None
        if all(o is None for o in outputs):
            w.input = w.outputs = None  # nothing waits: the input is not held
        return y


def sibling_sets(model: nn.Module) -> dict[nn.Module, tuple[nn.Module, ...]]:
    """Each linear named in ``SIBLINGS`` under one parent, with one input width and dtype, mapped to its set."""
    sets = {}
    for parent in model.modules():
        for names in SIBLINGS:
            members = tuple(getattr(parent, n, None) for n in names)
            if not all(isinstance(m, nn.Linear) for m in members):
                continue
            if len({m.in_features for m in members}) == 1 and len({m.weight.dtype for m in members}) == 1:
                sets.update((m, members) for m in members)
    return sets


def stored_weights(folder: Path) -> Callable[[str], torch.Tensor | None]:
    """A reader of the folder's stored tensors by name (every ``*.safetensors`` file), as stored: the model in
    memory holds them rounded to its dtype."""
    from safetensors import safe_open

    files = [safe_open(str(f), "pt") for f in sorted(folder.glob("*.safetensors"))]
    where = {name: f for f in files for name in f.keys()}  # noqa: SIM118 - safe_open is not iterable
    return lambda name: where[name].get_tensor(name) if name in where else None


def use_int4_weights(model: nn.Module, folder: Path | None) -> int:
    """Route every CPU ``nn.Linear`` of ``model`` (bf16) whose stored weights in ``folder`` lie exactly on a 4-bit
    grid through the int4 kernel up to ``max_rows()`` rows; returns how many layers were converted (0 when
    switched off, not bf16, or no stored weight qualifies). Call after ``pack_linears``: its forward is the one
    kept above the cut-over."""
    if folder is None or not enabled() or max_rows() <= 0:
        return 0
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    linears = [(n, m) for n, m in linears if m.weight.device.type == "cpu" and m.weight.dtype in DTYPES]
    if not linears or not kernel_agrees(linears[0][1].weight.dtype):
        return 0
    read, rows, done = stored_weights(Path(folder)), max_rows(), 0
    sets, waiting = sibling_sets(model), {}  # waiting: a set's grids so far (a layer's siblings come one after another)
    for name, module in linears:
        stored = read(f"{name}.weight")
        grid = None if stored is None or stored.shape != module.weight.shape else recover_grid(stored)
        if grid is None:
            continue
        module._int4_weight, module._int4_scales = pack_grid(*grid, module.weight.dtype)
        module._int4_dtype = module.weight.dtype
        module._int4_siblings = None  # until its set is complete
        if module in sets:
            got = waiting.setdefault(sets[module], {})
            got[module] = grid
            if len(got) == len(sets[module]):  # the set is complete: one shared product, its grids let go
                shared = Siblings([got[m] for m in sets[module]], module.weight.dtype)
                for slot, m in enumerate(sets[module]):
                    m._int4_siblings, m._int4_slot = shared, slot  # each keeps its own product for other cases
                del waiting[sets[module]]
        module._int4_version = weight_versions(module)
        module._int4_weight_key = weight_key(module.weight)
        module._int4_rows = rows
        module._int4_numel = rows * module.in_features  # inputs of more rows than the cut-over take the fallback
        module._int4_fallback = module.forward  # packed or nn.Linear's own
        module.forward = types.MethodType(_forward, module)
        done += 1
    return done
