"""Campaigns extract their feature caches one at a time (``training/extraction_turn.py``)."""

from __future__ import annotations

import threading
import time

from lilicorr.training.campaign_data import cache_progress
from lilicorr.training.extraction_turn import extraction_turn, holder, lock_path


def test_a_second_extraction_waits_for_the_first_and_names_it(tmp_path):
    lock = lock_path(tmp_path / "cache" / "features-a")
    order: list[str] = []
    holding = threading.Event()

    def first() -> None:
        with extraction_turn(lock, "plan-a") as turn:
            assert turn == {"waited_s": 0.0, "after": None}
            holding.set()
            time.sleep(0.5)
            order.append("a done")

    t = threading.Thread(target=first)
    t.start()
    assert holding.wait(5)
    assert holder(lock)["campaign"] == "plan-a"  # what `train status` shows the waiting campaign
    with extraction_turn(lock, "plan-b") as turn:  # flock: another open file description waits, even in-process
        order.append("b starts")
        assert turn["after"] == "plan-a" and turn["waited_s"] > 0.2
        assert holder(lock)["campaign"] == "plan-b"
    t.join()
    assert order == ["a done", "b starts"]
    assert holder(lock) is None  # released: nobody extracting


def test_status_names_the_campaign_whose_extraction_runs(tmp_path):
    cache = tmp_path / "cache" / "features-b"
    train = {"target": "t", "data": "d", "features": str(cache), "max_sequences": 64}
    assert cache_progress(train)[0]["extracting"] is None
    with extraction_turn(lock_path(cache), "plan-a"):
        assert cache_progress(train)[0]["extracting"] == "plan-a"


def test_a_dead_holder_is_nobody(tmp_path):
    lock = lock_path(tmp_path / "c" / "f")
    lock.parent.mkdir(parents=True)
    lock.write_text('{"campaign": "gone", "pid": 999999999}')  # a driver killed while extracting
    assert holder(lock) is None
    with extraction_turn(lock, "plan-b") as turn:  # the kernel released its flock: no wait
        assert turn["after"] is None
