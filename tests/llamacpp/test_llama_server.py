"""The llama.cpp deployment path, end to end (``make llamacpp-check``; not part of ``make test``: it needs
the llama-server build of ``make llamacpp``): the shipped SmolLM2 drafters, exported by ``lilicorr export
--format gguf``, draft in llama.cpp's own server, and at T = 0 its text equals llama-server without a
draft on 8 MT-Bench prompts (one per category). Acceptance is printed and must be above zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lilicorr.bench.llamacpp import LLAMA_SERVER, LlamaServer, chat, pooled
from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_DRAFT, SHIPPED_TARGET

TARGET_GGUF = Path(SHIPPED_TARGET + ".gguf")
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def prompts():
    from lilicorr.data.prompt_sets import load_set

    return load_set("mt-bench")[::10][:8]  # one per category


@pytest.fixture(scope="module")
def ar_answers(prompts):
    assert LLAMA_SERVER.exists(), f"{LLAMA_SERVER} missing: run `make llamacpp`"
    assert TARGET_GGUF.exists(), f"{TARGET_GGUF} missing: run `make target`"
    with LlamaServer(TARGET_GGUF, log="runs/llamacpp-check-ar.log") as server:
        return [chat(server, row, MAX_TOKENS) for row in prompts]


@pytest.mark.parametrize("drafter", [SHIPPED_DFLASH, SHIPPED_DRAFT], ids=["dflash", "lilicorr-backbone"])
def test_drafter_in_llama_server_keeps_the_text(drafter, prompts, ar_answers, tmp_path, capsys):
    from lilicorr.cli.main import main

    gguf = tmp_path / (Path(drafter).name + ".gguf")
    assert main(["export", "--format", "gguf", drafter, "--target", SHIPPED_TARGET, "--out", str(gguf)]) == 0
    with LlamaServer(TARGET_GGUF, gguf, log=f"runs/llamacpp-check-{Path(drafter).name}.log") as server:
        answers = [chat(server, row, MAX_TOKENS) for row in prompts]
    same = [a.text == b.text for a, b in zip(ar_answers, answers, strict=True)]
    stats = pooled(answers)
    with capsys.disabled():
        print(f"\n{Path(drafter).name} in llama-server: identical {sum(same)}/{len(same)}, {json.dumps(stats)}")
    assert all(same), [a.id for a, s in zip(answers, same, strict=True) if not s]
    assert stats["draft_tokens"] > 0 and stats["accepted"] > 0
