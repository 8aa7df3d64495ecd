"""Shipped weights split into files of at most a size (``checkpoint/shards.py``): the split folder loads
bit-exactly through our loader, a small file is left alone, and a tensor larger than the limit is refused by
name before anything is written."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from lilicorr.checkpoint import load_draft
from lilicorr.checkpoint.shards import INDEX, SINGLE, reshard_folder
from tests.models.test_checkpoint import TARGET, saved  # noqa: F401 - the module-scoped fixture


def test_a_large_file_becomes_shards_that_load_bit_exactly(saved, tmp_path):  # noqa: F811
    model, root = saved
    folder = tmp_path / "d"
    shutil.copytree(root / "a", folder)
    whole = load_file(str(folder / SINGLE))
    size = (folder / SINGLE).stat().st_size
    files = reshard_folder(folder, max_bytes=size // 3)
    assert len(files) >= 3 and not (folder / SINGLE).exists()
    assert all(f.stat().st_size <= size // 3 + 100_000 for f in files)  # tensor data ≤ the limit, plus a header
    index = json.loads((folder / INDEX).read_text())
    assert set(index["weight_map"]) == set(whole) and {f.name for f in files} == set(index["weight_map"].values())
    whole_model, split_model = load_draft(root / "a", TARGET).state_dict(), load_draft(folder, TARGET).state_dict()
    assert set(whole_model) == set(split_model) == set(model.state_dict())
    for k, v in whole_model.items():
        assert torch.equal(split_model[k], v), k


def test_a_small_file_stays_whole_and_an_oversized_tensor_is_refused(saved, tmp_path):  # noqa: F811
    _, root = saved
    folder = tmp_path / "d"
    shutil.copytree(root / "a", folder)
    assert reshard_folder(folder) == [folder / SINGLE] and not (folder / INDEX).exists()
    biggest = max(t.numel() * t.element_size() for t in load_file(str(folder / SINGLE)).values())
    with pytest.raises(ValueError, match="alone exceed"):
        reshard_folder(folder, max_bytes=biggest - 1)
    assert (folder / SINGLE).exists() and not (folder / INDEX).exists()  # nothing half-split
