"""Row selection that moves only the rows that change slot (``runtime/cache.py``)."""

import itertools

import torch

from lilicorr.runtime.cache import is_leave_order, leave_order, move_rows


def test_leave_order_keeps_rows_in_place_and_fills_freed_slots_from_the_tail():
    assert leave_order([0, 1, 2]) == [0, 1, 2]
    assert leave_order([0, 2, 3]) == [0, 3, 2]  # row 1 leaves: row 3 takes its slot, row 2 stays
    assert leave_order([2, 3]) == [2, 3]  # rows 0 and 1 leave: the two beyond take their slots
    assert leave_order([1, 4]) == [4, 1]
    for n in range(1, 7):  # every selection of every batch up to 6 rows
        for k in range(1, n + 1):
            for keep in itertools.combinations(range(n), k):
                order = leave_order(list(keep))
                assert sorted(order) == list(keep) and is_leave_order(order)
                moved = [dst for dst, src in enumerate(order) if dst != src]
                assert len(moved) == sum(1 for i in range(k) if i not in keep)  # only the freed slots are written


def test_is_leave_order_rejects_selections_that_would_overwrite_a_row_before_reading_it():
    assert not is_leave_order([1, 0])  # a swap: row 0 would be overwritten before it moves
    assert not is_leave_order([2, 2])
    assert is_leave_order([0, 1])


def test_move_rows_matches_indexing_and_reuses_the_storage():
    x = torch.arange(5 * 3).view(5, 3).float()
    want = x[[0, 4, 2]].clone()
    got = move_rows(x, [0, 4, 2])
    assert torch.equal(got, want) and got.data_ptr() == x.data_ptr()
