"""The per-target bench scripts (scripts/bench_drafters.sh, scripts/bench_speed.sh and their SmolLM2 wrappers) under
DRY_RUN=1: the ``lilicorr bench`` / ``report`` lines they would run, checked without running a benchmark.

The dry run reads only the registry and the committed drafter folders (models/<prefix>-dflash, …): neither the
target's folder nor the prompt files (both git-ignored) need to exist. The SmolLM2 lines are the ones the scripts
ran before they took a TARGET (scripts/bench_smollm2.sh, scripts/bench_speed_smollm2.sh, now wrappers): same
drafters, arms and flags; only the script a page records is the new one."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def words(text: str) -> list[str]:
    return text.split()


KNOBS = words(
    "TARGET PER_CAT MAX_NEW TEMPS DTYPE QUANT EXTRA_DRAFTS EXTRA_ARMS ARMS_ONLY ONLY_ARMS OUT PAGE TITLE NOTES SWEEP "
    "VOCABS GATE EXTRA_SWEEP DRY_RUN"
)
pytestmark = pytest.mark.skipif(not (ROOT / ".venv/bin/lilicorr").exists(), reason="the scripts run .venv/bin/lilicorr")


def dry_run(script: str, **knobs: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}  # only the knobs given here
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        env={**env, "DRY_RUN": "1", **knobs},
        capture_output=True,
        text=True,
        timeout=120,
    )


def commands(script: str, **knobs: str) -> dict[str, list[list[str]]]:
    """The printed command lines by subcommand (export, bench, report), each split as the shell would."""
    done = dry_run(script, **knobs)
    assert done.returncode == 0, done.stderr + done.stdout
    out: dict[str, list[list[str]]] = {}
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == ".venv/bin/lilicorr", line
        out.setdefault(words[1], []).append(words[2:])
    return out


def flag(words: list[str], name: str) -> list[str]:
    """The values after ``name`` up to the next flag."""
    i = words.index(name) + 1
    j = next((k for k in range(i, len(words)) if words[k].startswith("--")), len(words))
    return words[i:j]


def drafts(words: list[str]) -> list[str]:
    return [w.removeprefix("--draft=") for w in words if w.startswith("--draft=")] + [
        words[i + 1] for i, w in enumerate(words) if w == "--draft"
    ]


# the arms scripts/bench_smollm2.sh listed before it took a TARGET
SMOL_DRAFTER_ARMS = words(
    "ar ngram smollm2-dflash smollm2-dflash:ddtree smollm2-dflash:prob smollm2-dflash:adaptive smollm2-lilicorr "
    "smollm2-lilicorr:top1 smollm2-lilicorr:oracle smollm2-lilicorr:prob smollm2-lilicorr:tree smollm2-lilicorr:ddtree "
    "smollm2-lilicorr:adaptive smollm2-lilicorr-conv smollm2-lilicorr-conv:top1 smollm2-lilicorr-conv:oracle "
    "smollm2-lilicorr-conv:prob smollm2-lilicorr-conv:tree smollm2-lilicorr-conv:ddtree smollm2-dflash-head "
    "smollm2-dflash-head:oracle smollm2-dflash-head:prob smollm2-dflash2:dflash2 smollm2-dspark:dspark "
    "smollm2-domino:domino smollm2-dflash-int8 smollm2-dflash-nvfp4 smollm2-lilicorr-int8 smollm2-lilicorr-nvfp4"
)
SMOL_QUANT = [f"build/quant/smollm2-{d}-{q}" for d in ("dflash", "lilicorr") for q in ("int8", "nvfp4")]
SMOL_DRAFTS = [
    "models/smollm2-dflash",
    "models/smollm2-lilicorr",
    "models/smollm2-lilicorr-conv",
    "models/smollm2-dflash-head",
    "models/arms/smollm2-dflash2",
    "models/arms/smollm2-dspark",
    "models/arms/smollm2-domino",
    *SMOL_QUANT,
]
GEMMA_ARMS = (
    "ar ngram gemma3-270m-dflash gemma3-270m-dflash:default gemma3-270m-lilicorr gemma3-270m-lilicorr:top1 "
    "gemma3-270m-lilicorr:default"
)


def test_smollm2_drafters_line_is_the_one_before_the_target_knob():
    """Through the wrapper, which pins TARGET whatever the caller's environment says."""
    cmd = commands("bench_smollm2.sh", TARGET="gemma3-270m")
    (bench,) = cmd["bench"]
    assert bench[:2] == ["--target", "models/smollm2-135m-instruct"] and drafts(bench) == SMOL_DRAFTS
    assert flag(bench, "--only") == SMOL_DRAFTER_ARMS
    assert flag(bench, "--prompts") == ["data/prompts/eval-mt-bench-humaneval.jsonl"]
    tail = "--num-prompts 36 --max-new-tokens 32 --temperatures 0 1 --dtype auto --threads 2 --no-sweep"
    assert " ".join(bench).endswith(tail + " --out runs/bench-smollm2")
    (report,) = cmd["report"]
    assert report == [
        "runs/bench-smollm2/results.json", "--out", "docs/results/smollm2-drafters.md",
        "--title", "Results: SmolLM2-135M-Instruct drafters", "--baseline", "smollm2-dflash",
        "--command", "PER_CAT='4' MAX_NEW='32' DTYPE='auto' scripts/bench_drafters.sh",
        "--notes", "docs/results/smollm2-drafters-notes.md",
    ]  # fmt: skip
    # the quantized drafters are made before the bench that reads them (where build/ has none yet)
    assert {w[-1] for w in cmd.get("export", [])} <= set(SMOL_QUANT)


def test_smollm2_speed_line_is_the_one_before_the_target_knob():
    cmd = commands("bench_speed_smollm2.sh", TARGET="gemma3-270m")
    (bench,) = cmd["bench"]
    d, ll, c = "smollm2-dflash", "smollm2-lilicorr", "smollm2-lilicorr-conv"
    assert bench[:8] == ["--target", "models/smollm2-135m-instruct", "--draft", f"models/{d}", "--draft",
                         f"models/{ll}", "--draft", f"models/{c}"]  # fmt: skip
    assert flag(bench, "--only") == [
        "ar", "ngram", d, f"{d}:adaptive", f"{d}:ddtree", f"{d}:ddtree+lookup@b16", f"{d}:default", ll,
        f"{ll}:adaptive", f"{ll}:tree", f"{ll}:tree@b16", f"{ll}:ddtree@b16", f"{ll}:tree+lookup@b16",
        f"{ll}:default", c, f"{c}:tree+lookup@b16", f"{c}:default",
    ]  # fmt: skip
    assert flag(bench, "--sweep-arms") == ["ar", "ngram", f"{d}:adaptive", f"{d}:default", ll, f"{ll}:adaptive",
                                           f"{ll}:tree+lookup@b16", f"{ll}:default"]  # fmt: skip
    assert flag(bench, "--prompts") == ["data/prompts/eval-mt-bench-humaneval.jsonl"] and "--paired-ar" in bench
    assert flag(bench, "--out") == ["runs/bench-speed"] and flag(bench, "--temperatures") == ["0", "1"]
    (report,) = cmd["report"]
    assert flag(report, "--out") == ["docs/results/smollm2-speed.md"]
    assert flag(report, "--command") == ["PER_CAT='4' scripts/bench_speed.sh"]
    assert flag(report, "--title") == ["Results: speed of every chain and tree arm on SmolLM2-135M-Instruct"]


def test_smollm2_speed_knobs_of_the_defaults_page():
    """docs/results/smollm2-defaults.md's knobs: ONLY_ARMS replaces the arms, PAGE/NOTES/OUT are recorded."""
    knobs = dict(TEMPS="0", SWEEP="0", ONLY_ARMS="ar smollm2-dflash:default", DTYPE="bfloat16", OUT="runs/x",
                 PAGE="docs/results/smollm2-defaults.md", NOTES="docs/results/smollm2-defaults-notes.md")  # fmt: skip
    cmd = commands("bench_speed.sh", **knobs)
    (bench,) = cmd["bench"]
    assert flag(bench, "--only") == ["ar", "smollm2-dflash:default"] and "--no-sweep" in bench
    assert flag(bench, "--dtype") == ["bfloat16"] and flag(bench, "--out") == ["runs/x"]
    (report,) = cmd["report"]
    assert flag(report, "--command") == [
        "PER_CAT='4' TEMPS='0' SWEEP='0' ONLY_ARMS='ar smollm2-dflash:default' DTYPE='bfloat16' "
        "PAGE='docs/results/smollm2-defaults.md' NOTES='docs/results/smollm2-defaults-notes.md' OUT='runs/x' "
        "scripts/bench_speed.sh"
    ]
    assert flag(report, "--notes") == ["docs/results/smollm2-defaults-notes.md"]


def test_gemma_drafters_page_command():
    """The hand-typed bench behind docs/results/gemma3-270m-drafters.md, as knobs of the same script: no
    quantized exports for arms it does not run, the raw-text prompts, the Gemma drafters only."""
    knobs = dict(TARGET="gemma3-270m", TEMPS="0", MAX_NEW="64", DTYPE="float32",
                 EXTRA_ARMS="gemma3-270m-dflash:default gemma3-270m-lilicorr:default", ARMS_ONLY=GEMMA_ARMS,
                 OUT="runs/bench-gemma-s36")  # fmt: skip
    cmd = commands("bench_drafters.sh", **knobs)
    assert "export" not in cmd
    (bench,) = cmd["bench"]
    assert flag(bench, "--target") == ["models/gemma3-270m"]
    assert drafts(bench) == ["models/gemma3-270m-dflash", "models/gemma3-270m-lilicorr"]
    assert flag(bench, "--only") == words(GEMMA_ARMS)
    assert flag(bench, "--prompts") == ["data/prompts/eval-mt-bench-humaneval-raw.jsonl"]
    assert " ".join(bench).endswith(
        "--num-prompts 36 --max-new-tokens 64 --temperatures 0 --dtype float32 --threads 2 --no-sweep "
        "--out runs/bench-gemma-s36"
    )
    (report,) = cmd["report"]
    assert flag(report, "--out") == ["docs/results/gemma3-270m-drafters.md"]
    assert flag(report, "--title") == ["Results: Gemma 3 270M (base) drafters"]
    assert flag(report, "--notes") == ["docs/results/gemma3-270m-drafters-notes.md"]
    (recorded,) = flag(report, "--command")
    assert recorded.startswith("TARGET='gemma3-270m' ") and recorded.endswith(
        "OUT='runs/bench-gemma-s36' scripts/bench_drafters.sh"
    )
    assert shlex.split(recorded)[0] == "TARGET=gemma3-270m" and f"ARMS_ONLY='{GEMMA_ARMS}'" in recorded


def test_gemma_speed_keeps_the_arms_of_drafters_it_has():
    """No LiLiCorr-conv drafter for Gemma: its arms drop out, the rest follow the target's prefix."""
    cmd = commands("bench_speed.sh", TARGET="gemma3-270m")
    (bench,) = cmd["bench"]
    assert flag(bench, "--target") == ["models/gemma3-270m"]
    assert drafts(bench) == ["models/gemma3-270m-dflash", "models/gemma3-270m-lilicorr"]
    arms = flag(bench, "--only") + flag(bench, "--sweep-arms")
    assert "gemma3-270m-lilicorr:tree+lookup@b16" in arms and "gemma3-270m-dflash:default" in arms
    assert all(a in ("ar", "ngram") or a.startswith("gemma3-270m-") for a in arms)
    assert not any(a.startswith("gemma3-270m-lilicorr-conv") for a in arms)
    assert flag(bench, "--prompts") == ["data/prompts/eval-mt-bench-humaneval-raw.jsonl"]
    assert flag(bench, "--out") == ["runs/bench-speed-gemma3-270m"]
    (report,) = cmd["report"]
    page = "gemma3-270m-speed.md"  # not written yet: the page a first run would make, with no notes file yet
    assert flag(report, "--out") == [f"docs/results/{page}"] and "--notes" not in report
    assert flag(report, "--command") == ["TARGET='gemma3-270m' PER_CAT='4' scripts/bench_speed.sh"]


def test_unknown_target_and_foreign_arm_stop_before_any_command():
    done = dry_run("bench_drafters.sh", TARGET="llama-9000")
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown target 'llama-9000'" in done.stderr
    done = dry_run("bench_drafters.sh", TARGET="gemma3-270m", ARMS_ONLY="ar smollm2-dflash")
    assert done.returncode == 2 and "ARMS_ONLY: smollm2-dflash is not an arm" in done.stdout
