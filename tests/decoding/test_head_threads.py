"""The LiLiCorr head's pass follows the one-thread rule of small passes (``runtime/threads.py``) by rows."""

import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime import threads
from tests.decoding.engine_helpers import random_draft


def test_head_runs_on_one_thread_for_one_or_two_rows_only(tiny_target, monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv(threads.ENV, raising=False)
    draft = random_draft(tiny_target, lilicorr=True)
    seen: list[tuple[int, int]] = []  # (rows, threads) at each head pass
    handle = draft.lilicorr.register_forward_pre_hook(
        lambda m, a: seen.append((a[0].shape[0], torch.get_num_threads()))
    )
    try:
        engine = build_engine(tiny_target, SpecConfig(method="lilicorr", num_speculative_tokens=3), draft)
        for rows in (1, 3):
            reqs = [Request([5 + i, 9, 2, 7], SamplingParams(max_tokens=6)) for i in range(rows)]
            engine.generate(reqs)
        assert {t for r, t in seen if r <= 2} == {1} and {t for r, t in seen if r > 2} == {2}
        assert torch.get_num_threads() == 2
    finally:
        handle.remove()
        torch.set_num_threads(before)
