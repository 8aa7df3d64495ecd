"""``DATA_CARD.md`` for a regenerated (or fixed-answer) dataset: what a drafter trained on it learned from.

Written by ``lilicorr data regenerate`` from the run's configuration and its shard manifest — after every
shard while the run is going (so a run cut by a session's end still has a card saying how far it got) and
once more, with the merged file's hash, when it completes. Every figure comes from the files: prompts
(file and sha256), engine(s) and dtype per shard, sampling, row and token counts, EOS-terminated rows,
hashes, and the wall time the shards took.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text


def _sha(path: Path) -> str:
    """The prompts file's sha256, hashed once per version of the file (the card is rewritten every shard)."""
    if not path.exists():
        return "(missing)"
    st = path.stat()
    return _sha_of(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _sha_of(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _by_engine(shards: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for info in shards.values():
        key = f"{info.get('engine')} ({info.get('dtype')})" if info.get("dtype") else str(info.get("engine"))
        e = out.setdefault(key, {"shards": 0, "rows": 0, "tokens": 0, "seconds": 0.0})
        e["shards"] += 1
        e["rows"] += info["rows"]
        e["tokens"] += info["answer_tokens"]
        e["seconds"] += info["seconds"]
    return out


def data_card(cfg: dict, manifest: dict, command: str, total_rows: int, merged: dict | None = None) -> str:
    """The card for ``cfg`` (a ``RegenConfig`` as a dict) from its ``manifest``; ``merged`` (the completed
    run's ``out.json`` facts) adds the data file's hash, else the card says how far the run is."""
    shards = manifest["shards"]
    rows = sum(s["rows"] for s in shards.values())
    tokens = sum(s["answer_tokens"] for s in shards.values())
    sampled = sum(s.get("sampled_rows", 0) for s in shards.values())
    eos = sum(s.get("eos_rows", 0) for s in shards.values())
    status = (
        f"complete: `{Path(cfg['out']).name}` sha256 (16) {merged['sha256_16']}"
        if merged
        else f"**in progress**: {rows} of {total_rows} rows answered; rerun the command to continue"
    )
    prompts = f"`{cfg['prompts']}` (sha256 {_sha(Path(cfg['prompts']))})" if cfg["prompts"] else "corpus windows"
    sampling = (
        "none: the rows' own answers (engine fixed)"
        if cfg["engine"] == "fixed"
        else f"every row's temperature from its index: {sampled} rows at T=1 (plain sampling, seeded per row "
        f"except on vllm), {rows - sampled} greedy"
    )
    layout = manifest["layout"]
    if not cfg["prompts"]:
        fmt = f"raw text: corpus windows of {cfg.get('categories', 'code,prose')} documents, continued"
    elif cfg.get("text_format") == "raw":
        fmt = ("raw text: each row's prompt (or first user turn) without a template, `<bos>` first where the "
               "tokenizer adds one, continued by the target")  # fmt: skip
    else:
        fmt = "chat: the target's chat template, assistant turn opened"
    lines = [
        f"# Data card: `{Path(cfg['out']).name}`",
        "",
        "Written by `lilicorr data regenerate` from the shard manifest (`manifest.json` beside the shards).",
        "",
        "| field | value |",
        "|---|---|",
        f"| status | {status} |",
        f"| command | `{command}` |",
        f"| target | `{cfg['target']}` |",
        f"| prompts | {prompts}, file order; prompts over {cfg['max_prompt_tokens']} tokens skipped"
        + (f"; starts after the first {cfg['skip_prompts']} that fit" if cfg.get("skip_prompts") else "")
        + " |",
        f"| prompt format | {fmt} |",
        f"| sampling | {sampling} |",
        f"| answers | at most {cfg['new_tokens']} tokens; {eos} of {rows} rows end at EOS |",
        f"| answer tokens | {tokens} (mean {tokens / max(rows, 1):.1f} per row) |",
        f"| row layout | {layout['length']} tokens, right-padded; `loss_mask` on answer tokens only |",
        f"| shards | {len(shards)} shards of {cfg['shard_size']} rows, each with its sha256 in `manifest.json` |",
        "",
        "| engine | shards | rows | answer tokens | wall time (answering) | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in sorted(_by_engine(shards).items()):
        rate = f"{e['tokens'] / e['seconds']:.0f}" if e["seconds"] and not name.startswith("fixed") else "—"
        lines.append(f"| {name} | {e['shards']} | {e['rows']} | {e['tokens']} | {e['seconds'] / 60:.1f} min | {rate} |")
    lines += [
        "",
        "Wall time is per shard, from the previous shard's end (or the engine's start) to this one's: the",
        "engine's model load is not in it; a shard's time includes whatever else ran on the machine then.",
        "",
    ]
    return "\n".join(lines)


def write_data_card(folder: str | Path, text: str) -> Path:
    """``folder/DATA_CARD.md`` (the committed copy, e.g. ``data/cards/NAME``)."""
    path = Path(folder) / "DATA_CARD.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path
