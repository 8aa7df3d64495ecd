"""Every export of a drafter checkpoint behind one interface, chosen by name: ``export(name, ...)``.

- ``hf``: a vLLM / SGLang folder (tensor-name scheme A or B, float dtype) — ``hf.py``;
- ``nvfp4`` / ``int8``: quantized folders vLLM and SGLang load — ``quantized.py``;
- ``gguf``: a llama.cpp drafter file, by llama.cpp's own converter (needs the target folder) — ``gguf.py``.

Adding a format is one module with a function ``(checkpoint, out, options) -> dict`` plus one line in
``EXPORTERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportOptions:
    target: str | None = None  # the target's folder (gguf: tokenizer, mask token)
    scheme: str = "A"  # hf: tensor-name scheme
    dtype: str = "bfloat16"  # hf: float dtype
    draft_vocab: int | None = None  # gguf: reduced draft vocabulary (d2t + the target's rows of the LM head)
    backbone_only: bool = False  # gguf: the DFlash backbone alone (any llama.cpp with DFlash runs it)


def _load(checkpoint: str):
    import torch

    from lilicorr.checkpoint import load_draft

    return load_draft(checkpoint, dtype=torch.float32, int8_kernels=False)


def _hf(checkpoint: str, out: str, opts: ExportOptions) -> dict:
    from lilicorr.export.hf import export_hf

    return export_hf(_load(checkpoint), out, opts.scheme, opts.dtype)


def _quantized(scheme: str) -> Callable[[str, str, ExportOptions], dict]:
    def run(checkpoint: str, out: str, opts: ExportOptions) -> dict:
        from lilicorr.export.quantized import export_quantized

        if opts.scheme != "A":
            raise ValueError("quantized exports write Scheme A names (what vLLM and SGLang load)")
        return export_quantized(_load(checkpoint), out, scheme, source=str(checkpoint))

    return run


def _gguf(checkpoint: str, out: str, opts: ExportOptions) -> dict:
    from lilicorr.export.gguf import export_gguf

    if not opts.target:
        raise ValueError("--format gguf needs --target TARGET_DIR (llama.cpp takes the tokenizer from it)")
    return export_gguf(checkpoint, opts.target, out, draft_vocab=opts.draft_vocab, backbone_only=opts.backbone_only)


EXPORTERS: dict[str, Callable[[str, str, ExportOptions], dict]] = {
    "hf": _hf,
    "nvfp4": _quantized("nvfp4"),
    "int8": _quantized("int8"),
    "gguf": _gguf,
}


def export(name: str, checkpoint: str | Path, out: str | Path, opts: ExportOptions | None = None) -> dict:
    """Write ``checkpoint`` in format ``name`` to ``out``; bad input is a named error and writes nothing."""
    if name not in EXPORTERS:
        raise ValueError(f"export format {name!r}: expected one of {', '.join(EXPORTERS)}")
    return EXPORTERS[name](str(checkpoint), str(out), opts or ExportOptions())
