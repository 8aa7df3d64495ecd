"""Shared check for the ``data regenerate`` engine adapters that need a separate build (llama.cpp in
``make llamacpp-check``, vLLM in ``make compat``): a few SmolLM2 prompts at T=0 through the engine and
through the native engine, laid out alike and mostly the same tokens."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.shipped import SHIPPED_TARGET

N, NEW = 6, 24


def regen_with(engine: str, tmp: Path):
    from lilicorr.datagen.regenerate import RegenConfig, load_regenerated, regenerate

    if not (tmp / "p.jsonl").exists():
        from lilicorr.data.prompt_sets import load_set

        rows = load_set("mt-bench")[::13][:N]
        (tmp / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp / f"{engine}.safetensors"
    cfg = RegenConfig(target=SHIPPED_TARGET, out=str(out), prompts=str(tmp / "p.jsonl"), num_sequences=N,
                      new_tokens=NEW, max_prompt_tokens=1024, shard_size=4, concurrency=4, sampled_fraction=0.0,
                      engine=engine)  # fmt: skip
    meta = regenerate(cfg)
    return meta, load_regenerated(out)


def check_against_native(engine: str, tmp: Path, eos_id: int = 2) -> float:
    """Same prompts and layout as native; returns the share of answer tokens before the first difference."""
    meta, data = regen_with(engine, tmp)
    _, ref = regen_with("native", tmp)
    assert meta["engines"] == [engine] and meta["sequences"] == N
    same = total = 0
    for i in range(N):
        p = int(ref["loss_mask"][i].nonzero()[0])  # the same templated prompt, the answer right after it
        assert int(data["loss_mask"][i].nonzero()[0]) == p
        assert data["tokens"][i, :p].tolist() == ref["tokens"][i, :p].tolist()
        a, b = ref["tokens"][i][ref["loss_mask"][i]].tolist(), data["tokens"][i][data["loss_mask"][i]].tolist()
        assert 1 <= len(b) <= NEW
        if len(b) < NEW:
            assert b[-1] == eos_id, "an answer that stopped early must end with EOS"
        k = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        same, total = same + k, total + len(a)
    return same / total
