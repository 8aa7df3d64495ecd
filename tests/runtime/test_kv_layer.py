"""The in-place KV layer behaves as transformers' DynamicLayer under every edit the runtime makes, without
copying the cache on an append that fits."""

import torch
from transformers.cache_utils import DynamicLayer

from lilicorr.runtime.kv_layer import GrowingLayer, runtime_cache


def _kv(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, n, 4, generator=g), torch.randn(b, 2, n, 4, generator=g)


def _same(a, b):
    assert a.get_seq_length() == b.get_seq_length()
    assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_growing_layer_matches_dynamic_layer_under_runtime_edits():
    ours, ref = GrowingLayer(), DynamicLayer()
    batch = 3
    for seed, n in enumerate((7, 1, 1, 5, 1, 30, 2, 1, 80, 3)):  # prefills, steps, verifies; several growths
        for layer in (ours, ref):
            k, v = layer.update(*_kv(batch, n, seed))
            assert torch.equal(k, layer.keys) and torch.equal(v, layer.values)
        _same(ours, ref)
        if n == 5:  # rejected drafts dropped
            ours.crop(-3), ref.crop(-3)
            _same(ours, ref)
        if n == 30:  # an accepted tree path moved to the front of the tail, in place (keep_new)
            for layer in (ours, ref):
                layer.keys[:, :, -4:] = layer.keys[:, :, -4:].flip(2)
            _same(ours, ref)
        if n == 2:  # compaction replaces keys, then values (as runtime.compact does); a finished row leaves
            for layer in (ours, ref):
                for name in ("keys", "values"):
                    setattr(layer, name, getattr(layer, name)[:, :, 5:].clone())
                layer.reorder_cache(torch.tensor([2, 0]))
            batch = 2
            _same(ours, ref)


def test_append_that_fits_does_not_copy_the_cache():
    layer = GrowingLayer()
    layer.update(*_kv(2, 10, 0))
    buf = layer._buf["keys"].data_ptr()
    for s in range(20):  # the first allocation leaves ≥ 64 columns of headroom
        layer.update(*_kv(2, 1, s + 1))
    assert layer._buf["keys"].data_ptr() == buf and layer.get_seq_length() == 30
    layer.crop(-10)
    layer.update(*_kv(2, 3, 99))  # cropped columns are reused, not reallocated
    assert layer._buf["keys"].data_ptr() == buf and layer.get_seq_length() == 23


def test_runtime_cache_replaces_attention_layers_only(tiny_target):
    cache = runtime_cache(tiny_target.model.config)
    assert cache.layers and all(isinstance(x, GrowingLayer) for x in cache.layers)


def test_keep_rows_matches_reorder_without_reallocating():
    ours, ref = GrowingLayer(), DynamicLayer()
    for layer in (ours, ref):
        layer.update(*_kv(4, 6, 0))
    buf = ours._buf["keys"].data_ptr()
    ours.keep_rows([0, 3, 2])  # row 1 left; row 3 moved into its slot
    ref.reorder_cache(torch.tensor([0, 3, 2]))
    _same(ours, ref)
    assert ours._buf["keys"].data_ptr() == buf
    for layer in (ours, ref):  # appends after the selection land in the kept rows' buffer
        layer.update(*_kv(3, 2, 1))
    _same(ours, ref)
    assert ours._buf["keys"].data_ptr() == buf
