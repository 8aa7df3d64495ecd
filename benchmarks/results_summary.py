"""The README's results summary, generated from the committed result pages (``docs/results/*.md``).

For each page made by ``lilicorr report``, per temperature: the arm with the highest pooled τ and the arm
with the highest speedup over (paired) plain decoding, copied from the page's main table, with a link to it
(the oracle arms, which read the target's own answer, are left out).
Rewrites the block between ``<!-- results-summary -->`` markers in README.md; prints it with ``--print``.

    python benchmarks/results_summary.py
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN, END = "<!-- results-summary:begin -->", "<!-- results-summary:end -->"


def _main_table(text: str) -> list[dict]:
    """Rows of the page's first table that has a 'T' and an 'arm' column."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cols[:2] == ["T", "arm"]:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                rows.append(dict(zip(cols, cells, strict=False)))
            return rows
    return []


def _num(cell: str) -> float:
    m = re.match(r"[\d.]+", cell or "")
    return float(m.group()) if m else float("nan")


def _metric_table(text: str, heading: str, prefix: bool = False) -> dict[str, dict[int, float]]:
    """A serving page's table under ``## heading`` (``prefix``: the first heading that starts so): arm →
    {concurrency: value}."""
    lines = text.splitlines()
    starts = [
        k for k, line in enumerate(lines) if line == f"## {heading}" or prefix and line.startswith(f"## {heading}")
    ]
    if not starts:
        return {}
    i = starts[0] + 2
    levels = [int(c.strip().removeprefix("c=")) for c in lines[i].strip().strip("|").split("|")[1:]]
    table = {}
    for row in lines[i + 2 :]:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        table[cells[0]] = {c: _num(v) for c, v in zip(levels, cells[1:], strict=False) if v}
    return table


def serving_rows(page: Path) -> list[str]:
    """For a serving page (``lilicorr bench serve``): each arm's output tokens/s over plain serving's, the lowest
    and highest over the concurrency levels, and at concurrency 1 — the page's ratios paired within a round where
    it has them (``--rounds``), else the ratio of its tokens/s cells."""
    text = page.read_text()
    ratios_by_arm = _metric_table(text, "output tokens/s × plain serving, paired by round", prefix=True)
    if not ratios_by_arm:
        table = _metric_table(text, "output tokens/s")
        plain = table.get("plain", {})
        ratios_by_arm = {arm: {c: v / plain[c] for c, v in by_c.items() if plain.get(c)}
                         for arm, by_c in table.items() if arm != "plain"}  # fmt: skip
    out = []
    for arm, cells in ratios_by_arm.items():
        ratios = {c: v for c, v in cells.items() if v == v}  # a "failed" cell (the arm served nothing) reads NaN
        failed = sorted(set(cells) - set(ratios))
        if not ratios:
            continue
        lo, hi = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
        one = f"; c=1 {ratios[1]:.2f}×" if 1 in ratios and 1 not in (lo, hi) else ""
        out.append(f"| [{page.stem}] | mixed | {arm} | × plain serving: {ratios[lo]:.2f}× (c={lo}) to "
                   f"{ratios[hi]:.2f}× (c={hi}){one}"
                   + (f"; failed c={', '.join(map(str, failed))}" if failed else "") + " |")  # fmt: skip
    return out


LLAMACPP_TITLE = "# llama.cpp beside lilicorr"


def llamacpp_rows(page: Path) -> list[str]:
    """For the llama.cpp page (``benchmarks/llamacpp_speed.py``): against llama-server's plain decoding, its best
    drafter arm and our engine's default (what ``generate --draft`` runs), each with its τ."""
    lines = page.read_text().splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("| arm | tokens/s | × llama.cpp AR")), None)
    if head is None:
        return []
    rows = []
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        arm, tps, _, tau, _ = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((arm, _num(tps), _num(tau)))
    ar = next((tps for arm, tps, _ in rows if arm == "llama.cpp AR"), None)
    drafters = [r for r in rows if r[0].startswith("llama.cpp + ")]
    engine = next((r for r in rows if r[0].startswith("lilicorr engine default")), None)
    if not ar or not drafters:
        return []

    def short(arm: str) -> str:  # "llama.cpp + smollm2-dflash: DFlash, draft vocab 16k [dflash+draft-vocab-16384]"
        vocab = re.search(r"draft-vocab-(\d+)", arm)
        return arm.removeprefix("llama.cpp + ").split(":")[0] + (f"@{int(vocab[1]) // 1024}k" if vocab else "")

    best, most = max(drafters, key=lambda r: r[1]), max(drafters, key=lambda r: r[2])
    out = [f"| [{page.stem}] | 0 | llama-server + {short(most[0])} {most[2]:.3f} | "
           f"{short(best[0])} {best[1] / ar:.2f}× llama-server AR |"]  # fmt: skip
    if engine:
        out.append(f"| [{page.stem}] | 0 | our engine's default {engine[2]:.3f} | "
                   f"our engine's default {engine[1] / ar:.2f}× llama-server AR ({ar:.0f} tokens/s) |")  # fmt: skip
    return out


def summary(pages: list[Path]) -> str:
    out = ["| page | T | highest τ | best speedup vs plain decoding |", "|---|---|---|---|"]
    links: dict[str, str] = {}
    for page in pages:
        serving = serving_rows(page) if page.read_text().startswith("# Serving under load") else []
        if serving:
            out += serving
            links[page.stem] = page.as_posix()
            continue
        llamacpp = llamacpp_rows(page) if page.read_text().startswith(LLAMACPP_TITLE) else []
        if llamacpp:
            out += llamacpp
            links[page.stem] = page.as_posix()
            continue
        rows = _main_table(page.read_text())
        if not rows:
            continue
        speed_col = "speedup vs paired AR" if rows[0].get("speedup vs paired AR", "—") != "—" or any(
            r.get("speedup vs paired AR", "—") != "—" for r in rows) else "speedup vs AR"  # fmt: skip
        for t in sorted({r["T"] for r in rows}):
            # plain decoding is the baseline; the oracle reads the target's answer (a measurement, not a method)
            rs = [r for r in rows if r["T"] == t and r["arm"] != "ar" and ":oracle" not in r["arm"]]
            if not rs:
                continue
            tau = max(rs, key=lambda r: _num(r.get("τ pooled", "")))
            fast = max(rs, key=lambda r: _num(r.get(speed_col, "")))
            out.append(
                f"| [{page.stem}] | {t} | {tau['arm']} {tau['τ pooled']} | {fast['arm']} {fast.get(speed_col)} |"
            )
            links[page.stem] = page.as_posix()
    # reference-style links keep the rows within the README's 120 characters
    return "\n".join(out + [""] + [f"[{stem}]: {path}" for stem, path in links.items()])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", nargs="+", default=sorted(str(p) for p in Path("docs/results").glob("*.md")))
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    pages = [Path(p) for p in args.pages if not p.endswith("-notes.md")]
    block = summary(pages)
    if args.print:
        print(block)
        return 0
    readme = Path(args.readme)
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"error: {readme}: markers {BEGIN} / {END} not found", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")
    print(f"wrote the results summary into {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
