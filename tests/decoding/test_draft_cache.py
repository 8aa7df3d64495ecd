"""The drafter's context cache keeps rows as indexing would, moving only the rows that change slot."""

import torch

from lilicorr.decoding.draft_cache import DraftContextCache


def _cache(batch: int, cols: int) -> DraftContextCache:
    g = torch.Generator().manual_seed(batch * 100 + cols)
    kv = [(torch.randn(batch, 2, cols, 4, generator=g), torch.randn(batch, 2, cols, 4, generator=g)) for _ in range(2)]
    return DraftContextCache(kv=kv, valid=torch.rand(batch, cols, generator=g) > 0.3)


def test_select_rows_in_place_and_reordered_agree_with_indexing():
    for rows in ([0, 3, 2], [1, 0, 2]):  # a leave order (moved in place), then an arbitrary order (copied)
        cache = _cache(4, 5)
        want = [(k[rows].clone(), v[rows].clone()) for k, v in cache.kv], cache.valid[rows].clone()
        ptr = cache.kv[0][0].data_ptr()
        cache.select_rows(torch.tensor(rows))
        for (k, v), (wk, wv) in zip(cache.kv, want[0], strict=True):
            assert torch.equal(k, wk) and torch.equal(v, wv)
        assert torch.equal(cache.valid, want[1])
        assert (cache.kv[0][0].data_ptr() == ptr) == (rows == [0, 3, 2])
    cache = _cache(3, 4)
    cache.select_rows(torch.tensor([0, 2]))
    cache.append([(torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))] * 2, torch.ones(2, 1, dtype=torch.bool))
    assert cache.kv[0][0].shape == (2, 2, 5, 4) and cache.valid.shape == (2, 5)


def test_empty_cache_rows_select():
    cache = DraftContextCache.empty(3, 2, 2, 4, torch.float32)
    cache.select_rows(torch.tensor([0, 2]))
    assert cache.batch_size == 2 and all(k.shape == (2, 2, 0, 4) for k, _ in cache.kv)
