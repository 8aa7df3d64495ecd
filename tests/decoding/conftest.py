"""Decoding-test fixtures: a tiny-vocabulary target whose exact output distribution is enumerable."""

import pytest

from lilicorr.runtime.runtime import TargetRuntime

V = 6


class _Tok:
    eos_token_id = None

    def decode(self, ids, **kw):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def small_vocab_target():
    from tests.conftest import random_qwen3

    # embed_scale 3: context-dependent distributions, yet random drafts still get accepted.
    model = random_qwen3(V, hidden=32, layers=2, heads=2, kv_heads=1, max_pos=64, seed=7, embed_scale=3.0, eos_pad=None)
    return TargetRuntime(model, _Tok())
