"""The serving page: a table per metric (arms × concurrency) and one figure beside it."""

from __future__ import annotations

from lilicorr.bench.serve_page import LABELS, METRICS, paired_ratios, write_serve_page


def test_the_serving_page_has_every_metric_and_one_figure(tmp_path):
    level = {m: 1.0 + i for i, m in enumerate(METRICS)}
    results = {
        "config": {"target": "t", "max_tokens": 8, "temperatures": [0.0], "prompts": ["p"]},
        "arms": {
            "plain": [{"concurrency": c, "errors": 0, "requests": max(2, 2 * c), **level} for c in (1, 4)],
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
    assert (
        "requests a level (at least twice the concurrency): 2 at c=1, 8 at c=4;" in text
    )  # the load, not the prompt count
    assert [p.name for p in tmp_path.glob("*.png")] == ["serving.png"]
    assert "## Notes" not in text
    assert "OpenMP:" not in text  # a run from before the wait was recorded says nothing of it
    results["config"]["openmp"] = "our servers spin; llama-server waits"
    assert (
        "OpenMP: our servers spin; llama-server waits." in write_serve_page(results, tmp_path / "s.md", "x").read_text()
    )
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


def test_a_level_that_served_nothing_gives_no_figure_and_is_named(tmp_path):
    """A server that crashed mid-run fails every request of the later levels: those rounds must not enter a median
    or a paired ratio as 0 tokens/s (they would read 0.00× — a speed), and the page says where it happened."""

    def lv(c, r, tok_s, errors=0):
        return {"concurrency": c, "round": r, "requests": 4, "errors": errors, "output_tok_s": tok_s}

    dead = [lv(1, 1, 0.0, errors=4), lv(2, 0, 0.0, errors=4), lv(2, 1, 0.0, errors=4)]
    arms = {
        "plain": [lv(1, 0, 10.0), lv(1, 1, 10.0), lv(2, 0, 20.0), lv(2, 1, 20.0)],
        "crashy": [lv(1, 0, 12.0), *dead],
    }
    assert paired_ratios(arms) == {"crashy": {1: [1.2]}}
    results = {"config": {"target": "t", "max_tokens": 8, "temperatures": [0.0], "prompts": ["p"], "rounds": 2},
               "arms": arms}  # fmt: skip
    text = write_serve_page(results, tmp_path / "serving.md", "x").read_text()
    assert "| crashy | 1.20× | failed |" in text  # the ratio table: one round at c=1, nothing at c=2
    assert "| crashy | 12 | failed |" in text  # the tokens/s table: the median of the round that served
    assert (
        "- **crashy served nothing** (every request failed; no figure taken) at: c=1 round 2, c=2 round 1, "
        "c=2 round 2" in text
    )
