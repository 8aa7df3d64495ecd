"""A drafter folder re-written for Hugging Face-style loaders: tensor-name scheme A (what vLLM and SGLang
load) or B (ModelOpt / TensorRT-LLM), in a chosen float dtype."""

from __future__ import annotations

import torch

from lilicorr.checkpoint import save_draft

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def export_hf(model, out: str, scheme: str = "A", dtype: str = "bfloat16") -> dict:
    save_draft(model, out, scheme=scheme, dtype=DTYPES[dtype])
    return {"out": str(out), "architecture": model.cfg.architecture, "scheme": scheme, "dtype": dtype}
