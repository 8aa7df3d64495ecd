"""A bounded soak on loopback against the in-process server: rounds of mixed load (tests/serve/soak_load.py); after
each round every request is finished or released — no rows, caches, deferred taps, jobs or policy samples left.
Resident memory is checked on the ``lilicorr serve`` process itself (test_soak_memory.py): the kernel-cache bound
that keeps it flat is set by the command before torch loads, which an in-process server cannot have."""

from __future__ import annotations

import time

import httpx

from tests.serve.conftest import MODEL
from tests.serve.soak_load import soak_round

ROUNDS = 6


def _settled(loop, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while (loop.running or loop.waiting or loop.engine.seqs) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_soak_releases_everything_every_round(server):
    url, loop = server
    engine, t0 = loop.engine, time.monotonic()
    for _ in range(ROUNDS):
        assert time.monotonic() - t0 < 300, "soak over its time bound"
        cut = soak_round(url, MODEL)
        _settled(loop)
        assert cut > 0
        assert not loop.running and not loop.waiting and not loop.cancelled
        assert (
            engine.seqs == []
            and engine.tstate is None
            and engine.drafter.cache is None
            and engine.drafter.deferred == []
        )
        assert len(engine.policy.extra_draft.samples) <= 4 and len(engine.policy.extra_plain.samples) <= 4
        assert len(engine.stats.accepted_per_position) <= engine.n
    assert "lilicorr:spec_decode_policy_steps_total" in httpx.get(url + "/metrics").text
