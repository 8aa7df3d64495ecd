"""The llama.cpp deployment path, end to end (``make llamacpp-check``; not part of ``make test``: it needs
the patched llama-server build of ``make llamacpp``): the shipped SmolLM2 drafters — DFlash, LiLiCorr with its
head, LiLiCorr with the convolution, and the dflash2 arm as llama.cpp's DFlash2 — exported by ``lilicorr export
--format gguf``, draft in llama.cpp's own server on 8 MT-Bench prompts (one per category) and 4 HumanEval
code prompts at T = 0. Each answer must equal llama-server without a draft — or, where that plain answer
differs, llama-server's own model-free speculation (``--spec-type ngram-simple``): llama.cpp's greedy text
on the Q4_1 target depends on its batch shapes (a verify batch vs one token), the same way for any
speculation, so an answer that matches llama.cpp's own speculative answer is llama.cpp's numerics, not
our export. Acceptance is printed and must be above zero."""

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

    return load_set("mt-bench")[::10][:8] + load_set("humaneval")[::41][:4]  # one per category + code


@pytest.fixture(scope="module")
def ar_answers(prompts):
    assert LLAMA_SERVER.exists(), f"{LLAMA_SERVER} missing: run `make llamacpp`"
    assert TARGET_GGUF.exists(), f"{TARGET_GGUF} missing: run `make target`"
    with LlamaServer(TARGET_GGUF, log="runs/llamacpp-check-ar.log") as server:
        # run as llama.cpp's users run it: not under the PASSIVE OpenMP wait our commands export for torch
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
        assert not [v for v in environ if v.startswith((b"OMP_WAIT_POLICY=", b"GOMP_SPINCOUNT="))], environ
        return [chat(server, row, MAX_TOKENS) for row in prompts]


@pytest.fixture(scope="module")
def ngram_answers(prompts):
    """llama.cpp's own speculation (no drafter): the reference where batched verification changes the text."""
    with LlamaServer(TARGET_GGUF, spec_type="ngram-simple", log="runs/llamacpp-check-ngram.log") as server:
        return [chat(server, row, MAX_TOKENS) for row in prompts]


# (drafter folder, extra `lilicorr export` arguments)
DRAFTERS = {
    "dflash": (SHIPPED_DFLASH, []),
    "lilicorr": (SHIPPED_DRAFT, []),
    "lilicorr-conv": ("models/smollm2-lilicorr-conv", []),
    "dflash2": ("models/arms/smollm2-dflash2", []),
    "lilicorr-vocab8k": (SHIPPED_DRAFT, ["--draft-vocab", "8192"]),  # d2t + reduced output under the head
}


@pytest.mark.parametrize("case", DRAFTERS)
def test_drafter_in_llama_server_keeps_the_text(case, prompts, ar_answers, ngram_answers, tmp_path, capsys):
    from lilicorr.cli.main import main

    drafter, extra = DRAFTERS[case]
    gguf = tmp_path / (Path(drafter).name + ".gguf")
    cmd = ["export", "--format", "gguf", drafter, "--target", SHIPPED_TARGET, "--out", str(gguf), *extra]
    assert main(cmd) == 0
    with LlamaServer(TARGET_GGUF, gguf, log=f"runs/llamacpp-check-{case}.log") as server:
        answers = [chat(server, row, MAX_TOKENS) for row in prompts]
    same = [a.text == b.text for a, b in zip(ar_answers, answers, strict=True)]
    as_ngram = [a.text == b.text for a, b in zip(ngram_answers, answers, strict=True)]
    stats = pooled(answers)
    with capsys.disabled():
        print(
            f"\n{case} ({Path(drafter).name}) in llama-server: identical to plain decoding {sum(same)}/{len(same)}, "
            f"to llama.cpp's ngram speculation {sum(as_ngram)}/{len(same)}, {json.dumps(stats)}"
        )
    bad = [a.id for a, s, n in zip(answers, same, as_ngram, strict=True) if not (s or n)]
    assert not bad, f"answers that match neither plain decoding nor llama.cpp's own speculation: {bad}"
    assert stats["draft_tokens"] > 0 and stats["accepted"] > 0
