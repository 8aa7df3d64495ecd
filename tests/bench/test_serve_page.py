"""The serving page: a table per metric (arms × concurrency) and one figure beside it."""

from __future__ import annotations

from lilicorr.bench.serve_page import LABELS, METRICS, paired_ratios, write_serve_page


def test_the_serving_page_has_every_metric_and_one_figure(tmp_path):
    level = {m: 1.0 + i for i, m in enumerate(METRICS)}
    results = {
        "config": {"target": "t", "max_tokens": 8, "temperatures": [0.0], "prompts": ["p"]},
        "arms": {
            "plain": [{"concurrency": c, "errors": 0, **level} for c in (1, 4)],
            "spec": [
                {"concurrency": c, "errors": 1, "error_kinds": {"HTTP 500: slot busy": 1}, **level, "output_tok_s": 9.5}
                for c in (1, 4)
            ],  # fmt: skip
        },
    }
    page = write_serve_page(results, tmp_path / "serving.md", "lilicorr bench serve --x")
    text = page.read_text()
    for metric in METRICS:
        assert f"## {LABELS[metric]}" in text
    assert "| spec | 9.5 | 9.5 |" in text and "| arm | c=1 | c=4 |" in text
    assert "Errors over all arms, levels and rounds: 2." in text and "`lilicorr bench serve --x`" in text
    assert "- spec c=4: 1 × HTTP 500: slot busy" in text  # each failure named, not only counted
    assert [p.name for p in tmp_path.glob("*.png")] == ["serving.png"]
    assert "## Notes" not in text
    (tmp_path / "serving-notes.md").write_text("- read by hand\n")
    assert write_serve_page(results, tmp_path / "serving.md", "x").read_text().endswith("## Notes\n\n- read by hand\n")


def test_rounds_give_median_cells_and_ratios_paired_within_a_round(tmp_path):
    """Round 2 ran on a machine 2× slower for both arms: its ratio is the same, and the cells are medians."""

    def lv(c, r, tok_s):
        return {"concurrency": c, "round": r, "errors": 0, "output_tok_s": tok_s}

    arms = {"plain": [lv(1, 0, 10.0), lv(1, 1, 5.0), lv(1, 2, 9.0)],
            "spec": [lv(1, 0, 15.0), lv(1, 1, 7.5), lv(1, 2, 9.0)]}  # fmt: skip
    assert paired_ratios(arms) == {"spec": {1: [1.5, 1.5, 1.0]}}
    results = {"config": {"target": "t", "max_tokens": 8, "temperatures": [0.0], "prompts": ["p"], "rounds": 3},
               "arms": arms}  # fmt: skip
    text = write_serve_page(results, tmp_path / "serving.md", "x").read_text()
    assert "| spec | 1.50× (1.00–1.50) |" in text  # median and range of the paired ratios
    assert "| plain | 9 |" in text and "| spec | 9 |" in text  # medians over the rounds
    assert "3 rounds of every level" in text
