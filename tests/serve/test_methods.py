"""The server runs every registered method: ngram, DDTree, the LiLiCorr tree and a comparison-arm folder
answer the openai client with AR's text at T=0 and count drafts in /metrics; bad configs are named."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from lilicorr.decoding.config import read_speculative_config
from lilicorr.serve.server import build
from tests.decoding.engine_helpers import save_random_draft
from tests.serve.conftest import serve_app

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"


def _drafts(metrics: str) -> float:
    return sum(float(x.split()[-1]) for x in metrics.splitlines() if x.startswith("vllm:spec_decode_num_drafts_total{"))


@pytest.fixture(scope="module")
def folders(tiny_target_dir, tmp_path_factory):
    from lilicorr.models.arms import build_arm, save_arm
    from lilicorr.runtime.runtime import TargetRuntime

    root = tmp_path_factory.mktemp("methods")
    save_random_draft(tiny_target_dir, root / "dflash", lilicorr=False)
    save_random_draft(tiny_target_dir, root / "lilicorr", lilicorr=True)
    save_random_draft(tiny_target_dir, root / "arm", lilicorr=False)
    t = TargetRuntime.load(tiny_target_dir)
    torch.manual_seed(0)
    arm = build_arm("dspark", t.vocab_size, t.hidden_size, 8, 4)
    save_arm(arm, root / "arm", {"vocab": t.vocab_size, "hidden": t.hidden_size, "rank": 8, "k": 4})
    return root


@pytest.fixture(scope="module")
def ar_text(tiny_target_dir):
    app, _ = build(str(tiny_target_dir), None, "tiny", max_model_len=256)
    srv, th, url = serve_app(app)
    try:
        r = httpx.post(url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0}, timeout=60)
        return r.json()["choices"][0]["text"]
    finally:
        srv.should_exit = True
        th.join(timeout=10)


@pytest.mark.parametrize(
    "spec",
    [
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
        {"method": "ddtree", "model": "dflash", "tree_budget": 8},
        {"method": "lilicorr-tree", "model": "lilicorr", "tree_budget": 8},
        {"method": "dflash", "model": "arm", "num_speculative_tokens": 3},
        {"method": "dflash", "model": "lilicorr", "draft_sample_method": "probabilistic"},
        {"method": "dspark", "model": "arm", "num_speculative_tokens": 3},
    ],
    ids=["ngram", "ddtree", "lilicorr-tree", "arm-folder", "lilicorr", "arm-by-name"],
)
def test_every_method_serves_ar_text_and_counts_drafts(tiny_target_dir, folders, ar_text, spec):
    from openai import OpenAI

    if "model" in spec:
        spec = {**spec, "model": str(folders / spec["model"])}
    # the config as given (no load policy): whether the policy drafts depends on timings, and drafts are counted here
    config = read_speculative_config(json.dumps(spec))
    app, loop = build(str(tiny_target_dir), config, "tiny", max_model_len=256, load_policy=False)
    srv, th, url = serve_app(app)
    try:
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0)
        assert r.choices[0].text == ar_text
        assert _drafts(httpx.get(url + "/metrics").text) > 0
        if spec.get("model", "").endswith("arm"):  # by the folder (method dflash) or by name
            assert loop.engine.proposer.name == "dspark"  # the folder's arm.json chose the arm
    finally:
        srv.should_exit = True
        th.join(timeout=10)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"method": "eagle", "model": "x"}', "method 'eagle'"),
        ('{"method": "ddtree"}', "needs 'model'"),
        ('{"method": "ngram", "tree_budget": 4}', "method 'ngram' has no option 'tree_budget'"),
        ('{"method": "ngram", "prompt_lookup_max": 0}', "positive integer"),
        ('{"method": "dflash", "model": "m", "frob": 1}', "unknown keys"),
    ],
)
def test_bad_speculative_configs_are_named(text, match):
    with pytest.raises(ValueError, match=match):
        read_speculative_config(text)
