"""``ShardReader`` reads exactly what safetensors stores, row range by row range, and names a bad request."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from lilicorr.features.shard_reader import ShardReader


def test_rows_equal_the_stored_tensors_for_every_feature_dtype(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "taps": torch.randn(37, 12, generator=g).bfloat16(),
        "final": (torch.randn(37, 6, generator=g) * 4).to(torch.float8_e4m3fn),
        "final_scale": torch.rand(6, generator=g),
        "offsets": torch.tensor([0, 5, 17, 37]),
    }
    path = tmp_path / "00000.safetensors"
    save_file(tensors, str(path))
    stored = load_file(str(path))
    reader = ShardReader(path)
    for name, full in stored.items():
        n = full.shape[0]
        for lo, hi in ((0, n), (1, n - 1), (n - 1, n), (2, 2)):
            got = reader.rows(name, lo, hi)
            assert got.dtype == full.dtype and got.shape == full[lo:hi].shape
            assert torch.equal(
                got.view(torch.uint8) if got.is_floating_point() else got,
                full[lo:hi].view(torch.uint8) if full.is_floating_point() else full[lo:hi],
            )
    assert torch.equal(reader.tensor("offsets"), stored["offsets"])
    with pytest.raises(IndexError, match="rows 30:40 of 'taps' with 37 rows"):
        reader.rows("taps", 30, 40)
    with pytest.raises(KeyError, match="no tensor 'hidden'"):
        reader.rows("hidden", 0, 1)


def test_a_truncated_shard_is_a_named_error(tmp_path):
    path = tmp_path / "00000.safetensors"
    save_file({"taps": torch.randn(8, 4).bfloat16()}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        ShardReader(path).rows("taps", 6, 8)
