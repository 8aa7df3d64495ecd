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
        "| [smollm2-serving] | mixed | chain | × plain serving: 0.98× (c=2) to 1.22× (c=64); c=1 1.06× |",
        "| [smollm2-serving] | mixed | tree | × plain serving: 0.96× (c=64) to 1.34× (c=1) |",
        "| [smollm2-serving] | mixed | crashed | × plain serving: 0.91× (c=2) to 1.19× (c=1); failed c=64 |",
    ]


LLAMACPP_PAGE = """# llama.cpp beside lilicorr (SmolLM2-135M-Instruct, batch 1, T = 0)

| arm | tokens/s | × llama.cpp AR | τ | identical to its AR |
|---|---|---|---|---|
| llama.cpp AR | 100.0 | 1.00× | 1.0 | 24/24 |
| llama.cpp + smollm2-dflash: DFlash [dflash] | 40.0 | 0.40× | 1.6 | 23/24 |
| llama.cpp + smollm2-dflash: DFlash, draft vocab 8k [dflash+draft-vocab-8192] | 45.0 | 0.45× | 1.5 | 23/24 |
| llama.cpp + smollm2-lilicorr-conv: LiLiCorr-conv (head + greedy walk) [lilicorr+conv] | 30.0 | 0.30× | 1.7 | 23/24 |
| lilicorr engine AR | 20.0 | 0.20× | 1.0 | 24/24 |
| lilicorr engine default (`generate --draft`: tree) | 25.0 | 0.25× | 2.5 | 13/24 |
"""


def test_the_llamacpp_rows_compare_with_llama_servers_own_ar(tmp_path):
    page = tmp_path / "smollm2-llamacpp.md"
    page.write_text(LLAMACPP_PAGE)
    module = _summary_module()
    assert module.llamacpp_rows(page) == [
        "| [smollm2-llamacpp] | 0 | llama-server + smollm2-lilicorr-conv 1.700 | "
        "smollm2-dflash@8k 0.45× llama-server AR |",
        "| [smollm2-llamacpp] | 0 | our engine's default 2.500 | "
        "our engine's default 0.25× llama-server AR (100 tokens/s) |",
    ]
    assert "smollm2-llamacpp" in module.summary([page])
