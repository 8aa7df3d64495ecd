"""The LiLiCorr head inside llama.cpp (``make llamacpp-check``; needs the patched llama-server of ``make
llamacpp``): on the lattices llama-server actually drafted, its head scores equal ours within 1e-3 and its walk
picks the path ours picks; a GGUF whose head is damaged is refused by name and the server does not start.

Both sides see the same inputs: with ``LLAMA_LILICORR_DUMP`` set, llama-server writes per drafted block the
anchor (fused target features), each slot's hidden state after the final norm, its top-K ids with logits and
log-sum-exp (host side), and the packed lattice rows its graph produced. Our ``LiLiCorrHead`` (fp32, from the
drafter folder) scores the same ids / log-probs / hidden states / anchor, with the candidates' embeddings
from the target folder (dequantized from the same GGUF)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lilicorr.bench.llamacpp import LLAMA_SERVER, LlamaServer, chat
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET

TARGET_GGUF = Path(SHIPPED_TARGET + ".gguf")
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def lilicorr_gguf(tmp_path_factory) -> Path:
    from lilicorr.export.gguf import export_gguf

    assert LLAMA_SERVER.exists(), f"{LLAMA_SERVER} missing: run `make llamacpp`"
    assert TARGET_GGUF.exists(), f"{TARGET_GGUF} missing: run `make target`"
    out = tmp_path_factory.mktemp("lilicorr") / "smollm2-lilicorr.gguf"
    assert export_gguf(SHIPPED_DRAFT, SHIPPED_TARGET, out)["layout"] == "lilicorr"
    return out


@pytest.fixture(scope="module")
def dump(lilicorr_gguf, tmp_path_factory) -> list[dict]:
    from lilicorr.data.prompt_sets import load_set

    path = tmp_path_factory.mktemp("dump") / "lattices.jsonl"
    prompts = load_set("mt-bench")[::20][:4] + load_set("humaneval")[::55][:2]
    env = {"LLAMA_LILICORR_DUMP": str(path)}
    with LlamaServer(TARGET_GGUF, lilicorr_gguf, env=env, log="runs/llamacpp-check-lilicorr-dump.log") as server:
        for row in prompts:
            chat(server, row, MAX_TOKENS)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 20, f"only {len(rows)} drafted blocks dumped"
    return rows


def test_head_scores_and_walk_match_ours(dump):
    from lilicorr.checkpoint import load_draft
    from lilicorr.decoding.walk import walk_greedy
    from lilicorr.runtime.runtime import TargetRuntime

    draft = load_draft(SHIPPED_DRAFT, dtype=torch.float32, int8_kernels=False)
    head, k = draft.lilicorr.eval(), draft.lilicorr.k
    embed = TargetRuntime.load(SHIPPED_TARGET, dtype=torch.float32).embed_tokens
    worst, same_ids, same_path, compared = 0.0, 0, 0, 0
    n_slots = 0
    for row in dump:
        slots = row["slots"]
        lattice = np.array([s["lattice"] for s in slots], dtype=np.float32)  # [n, K + K*K]
        ids = torch.tensor([s["ids"] for s in slots])  # host top-K, rank order
        n_slots += len(slots)
        graph_ids = torch.from_numpy(lattice[:, :k]).long()
        if not torch.equal(graph_ids, ids):  # a tie in the logits ordered differently: not the same lattice
            continue
        same_ids += 1
        lp = torch.tensor([[v - s["lse"] for v in s["logit"]] for s in slots], dtype=torch.float64).float()
        hidden = torch.tensor([s["hidden"] for s in slots])
        valid = bool(row["anchor_valid"])
        anchor = torch.tensor(row["anchor"]) if valid else torch.zeros(hidden.shape[-1])
        with torch.no_grad():
            scores = head(hidden[None], embed(ids)[None], lp[None], anchor[None], torch.tensor([valid]))
        theirs = torch.from_numpy(lattice[:, k:]).reshape(len(slots), k, k)
        worst = max(worst, float((theirs[0, 0] - scores.start[0]).abs().max()))
        if len(slots) > 1:
            worst = max(worst, float((theirs[1:] - scores.pair[0]).abs().max()))
        ours = ids.gather(1, walk_greedy(scores)[0][:, None]).flatten().tolist()
        same_path += ours[: len(row["path"])] == row["path"]
        compared += 1
    print(
        f"\nLiLiCorr head in llama.cpp vs ours: {compared} lattices ({n_slots} slots), max |Δscore| {worst:.2e}, "
        f"same top-K ids {same_ids}/{len(dump)}, same walk {same_path}/{compared}"
    )
    assert same_ids >= 0.99 * len(dump)
    assert worst <= 1e-3
    assert same_path >= 0.99 * compared


def _damaged(src: Path, out: Path, drop: str, replace: dict | None = None) -> Path:
    from lilicorr.export.gguf import _append
    from lilicorr.export.gguf_layout import GGUFExtras

    _append(src, out, GGUFExtras(drop=[drop], tensors=replace or {}))
    return out


@pytest.mark.parametrize(
    "case",
    ["missing", "misshaped"],
)
def test_damaged_head_is_refused_by_name(case, lilicorr_gguf, tmp_path):
    """A LiLiCorr GGUF with a head tensor missing or of the wrong shape: llama-server exits, naming it,
    instead of serving with a half-built drafter (or none)."""
    if case == "missing":
        bad = _damaged(lilicorr_gguf, tmp_path / "bad.gguf", "lilicorr.in_head.weight")
    else:
        rank = np.zeros((7, 128), dtype=np.float32)  # K = 8 rows expected
        bad = _damaged(lilicorr_gguf, tmp_path / "bad.gguf", "lilicorr.rank_embd", {"lilicorr.rank_embd": rank})
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="llama-server exited") as err, LlamaServer(TARGET_GGUF, bad, log=log):
        pass
    text = log.read_text(errors="replace")
    name = "lilicorr.in_head.weight" if case == "missing" else "lilicorr.rank_embd"
    assert name in text, f"the refusal does not name {name}:\n{err.value}"
