"""Shipped weights in files of at most ``MAX_FILE_BYTES``: the Hugging Face sharded layout.

Why: every weight file committed stays in git history, and the project keeps each one ≤ 20 MB
(docs/guide/campaign.md, "Promotion"). A drafter for a wide target does not fit one such file (Gemma 3 270M's
two-layer DFlash drafter: 13.2 M parameters, 26.4 MB in bf16), so a shipped folder splits it the way
transformers, vLLM and SGLang all read: ``model-00001-of-0000N.safetensors`` … plus
``model.safetensors.index.json`` mapping each tensor to its file (huggingface_hub's
``split_torch_state_dict_into_shards`` decides the split; our loader reads the index too,
``checkpoint/io.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

MAX_FILE_BYTES = 20_000_000
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def reshard_folder(folder: str | Path, max_bytes: int = MAX_FILE_BYTES) -> list[Path]:
    """Split the folder's ``model.safetensors`` into shards of at most ``max_bytes`` (of tensor data) with an
    index, in place; a file already small enough is left alone. Returns the weight files the folder now has.
    Meant for a folder being staged (``atomic_write_dir``): a cut leaves the staged copy, never the shipped one,
    half-written."""
    from huggingface_hub import split_torch_state_dict_into_shards

    folder = Path(folder)
    single = folder / SINGLE
    if not single.exists() or single.stat().st_size <= max_bytes:
        return [single] if single.exists() else []
    tensors = load_file(str(single))
    split = split_torch_state_dict_into_shards(tensors, max_shard_size=max_bytes)
    parts = {name: {k: tensors[k].contiguous() for k in keys} for name, keys in split.filename_to_tensors.items()}
    for keys in split.filename_to_tensors.values():  # checked before anything is written: no half-split folder
        if sum(tensors[k].numel() * tensors[k].element_size() for k in keys) > max_bytes:
            raise ValueError(
                f"{single}: tensor(s) {keys} alone exceed {max_bytes} bytes: cannot ship in files that small"
            )
    files = []
    for name, part in parts.items():
        save_file(part, str(folder / name), metadata={"format": "pt"})
        files.append(folder / name)
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": dict(sorted(split.tensor_to_filename.items()))}  # fmt: skip
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    single.unlink()
    return files
