"""The README's results summary (``benchmarks/results_summary.py``) reads a serving page's paired ratios."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results_summary.py"

PAGE = """# Serving under load

## output tokens/s × plain serving, paired by round: median

| arm | c=1 | c=2 | c=64 |
|---|---:|---:|---:|
| chain | 1.06× | 0.98× | 1.22× |
| tree | 1.34× | 1.10× | 0.96× |
| empty |  |  |  |
| crashed | 1.19× | 0.91× | failed |

## output tokens/s

| arm | c=1 | c=2 | c=64 |
|---|---:|---:|---:|
| plain | 25 | 45 | 114 |
"""


def _summary_module():
    spec = importlib.util.spec_from_file_location("results_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_serving_row_names_its_worst_and_best_level_and_c1(tmp_path):
    page = tmp_path / "smollm2-serving.md"
    page.write_text(PAGE)
    rows = _summary_module().serving_rows(page)
    assert rows == [
        "| [smollm2-serving] | mixed | chain | × plain serving: worst c=2 0.98×, best c=64 1.22×; c=1 1.06× |",
        "| [smollm2-serving] | mixed | tree | × plain serving: worst c=64 0.96×, best c=1 1.34× |",
        "| [smollm2-serving] | mixed | crashed | × plain serving: worst c=2 0.91×, best c=1 1.19×; failed c=64 |",
    ]
