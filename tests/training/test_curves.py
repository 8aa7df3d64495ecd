"""The curves table compares runs at equal wall time and at equal data, on the τ that decides T = 0 decoding."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.training.curves import curves_table


def _run(root: Path, name: str, points: list[tuple[int, float, int, float, float]]) -> Path:
    """A run folder whose train.log holds validations (step, minutes, positions, all-rows τ, greedy-rows τ)."""
    run = root / name
    run.mkdir()
    lines = [{"event": "start", "config": {"data": "d.safetensors", "num_layers": 1, "anchors": 16, "threads": 1}}]
    for step, minutes, positions, tau, greedy in points:
        val = {"tau_top1_estimate": tau, "slot_acc": [0.3], "neighbour_same": 0.5,
               "greedy": {"tau_top1_estimate": greedy}, "sampled": {"tau_top1_estimate": 2 * tau - greedy}}  # fmt: skip
        lines.append({"step": step, "elapsed_s": minutes * 60, "positions": positions, "val": val})
    (run / "train.log").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return run


def test_table_reads_the_greedy_tau_at_equal_minutes_and_at_equal_positions(tmp_path: Path) -> None:
    fast = _run(tmp_path, "fast", [(100, 10.0, 1_000_000, 1.10, 1.20), (200, 20.0, 2_000_000, 1.20, 1.40)])
    slow = _run(tmp_path, "slow", [(100, 10.0, 500_000, 1.15, 1.30), (300, 30.0, 1_500_000, 1.25, 1.50)])
    header, _, row_fast, row_slow = curves_table([fast, slow]).strip().splitlines()
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert "greedy τ at 20.0 min" in cols and "greedy τ at 1.50 M positions" in cols

    def cell(row: str, col: str) -> str:
        return [c.strip() for c in row.strip("|").split("|")][cols.index(col)]

    # equal time (the shorter run's 20 minutes): the slow run halfway between its points, 1.30 → 1.50
    assert cell(row_fast, "greedy τ at 20.0 min") == "1.4000"
    assert cell(row_slow, "greedy τ at 20.0 min") == "1.4000"
    # equal data (the fewest positions reached, 1.5 M): the fast run halfway between 1.20 and 1.40
    assert cell(row_fast, "greedy τ at 1.50 M positions") == "1.3000"
    assert cell(row_slow, "greedy τ at 1.50 M positions") == "1.5000"
    assert cell(row_slow, "τ est. at 20.0 min") == "1.2000"  # all rows, as before


def test_a_run_resumed_with_other_threads_shows_each_count(tmp_path: Path) -> None:
    """Its minutes mix thread counts, so the threads column names them in order instead of the first start's."""
    kept = _run(tmp_path, "kept", [(100, 10.0, 1_000_000, 1.10, 1.20)])
    moved = _run(tmp_path, "moved", [(100, 10.0, 1_000_000, 1.10, 1.20)])
    with (moved / "train.log").open("a") as log:  # resumed twice, with 2 threads
        for _ in range(2):
            log.write(json.dumps({"event": "start", "config": {"data": "d.safetensors", "threads": 2}}) + "\n")
    header, _, row_kept, row_moved = curves_table([kept, moved]).strip().splitlines()
    col = [c.strip() for c in header.strip("|").split("|")].index("threads")
    assert [c.strip() for c in row_kept.strip("|").split("|")][col] == "1"
    assert [c.strip() for c in row_moved.strip("|").split("|")][col] == "1→2"
