"""``DATA_CARD.md`` for a regenerated (or fixed-answer) dataset: what a drafter trained on it learned from.

Written by ``lilicorr data regenerate --card DIR`` from the run's provenance and its shard manifest, so
every figure in it comes from the files themselves: prompts (file and sha256), engine(s) and dtype per
shard, sampling, row and token counts, hashes, and the wall time the shards took.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "(missing)"


def data_card(meta: dict, manifest: dict, command: str, eos_terminated: int) -> str:
    cfg = meta["config"]
    shards = manifest["shards"]
    by_engine: dict[str, dict] = {}
    for info in shards.values():
        key = f"{info.get('engine')} ({info.get('dtype')})" if info.get("dtype") else str(info.get("engine"))
        e = by_engine.setdefault(key, {"shards": 0, "rows": 0, "tokens": 0, "seconds": 0.0})
        e["shards"] += 1
        e["rows"] += info["rows"]
        e["tokens"] += info["answer_tokens"]
        e["seconds"] += info["seconds"]
    rows, tokens = meta["sequences"], meta["answer_tokens"]
    lines = [
        f"# Data card: `{Path(cfg['out']).name}`",
        "",
        "Made by `lilicorr data regenerate`; this card is written by the same command from the shard manifest.",
        "",
        "| field | value |",
        "|---|---|",
        f"| command | `{command}` |",
        f"| target | `{cfg['target']}` |",
        f"| prompts | `{cfg['prompts'] or 'corpus windows'}` (sha256 {_sha(Path(cfg['prompts'])) if cfg['prompts'] else '—'}) |",
        f"| rows | {rows} (prompts of at most {cfg['max_prompt_tokens']} templated tokens, file order) |",
        f"| sampling | {meta['sampled_sequences']} rows at T=1 (plain sampling, seed per row), {rows - meta['sampled_sequences']} greedy |",
        f"| answers | at most {cfg['new_tokens']} tokens; {eos_terminated} of {rows} end at EOS |",
        f"| answer tokens | {tokens} (mean {tokens / max(rows, 1):.1f} per row) |",
        f"| row layout | {meta['length']} tokens, right-padded; `loss_mask` on answer tokens only |",
        f"| data file sha256 (16) | {meta['sha256_16']} |",
        f"| shards | {len(shards)} of {cfg['shard_size']} rows, each with its sha256 in `manifest.json` |",
        "",
        "| engine | shards | rows | answer tokens | wall time (answering) | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in sorted(by_engine.items()):
        rate = e["tokens"] / e["seconds"] if e["seconds"] else float("nan")
        lines.append(
            f"| {name} | {e['shards']} | {e['rows']} | {e['tokens']} | {e['seconds'] / 60:.1f} min | {rate:.0f} |"
        )
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
