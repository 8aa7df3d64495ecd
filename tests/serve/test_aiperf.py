"""NVIDIA's aiperf drives the server unmodified: 32 requests at concurrency 8, zero errors, and it
scrapes our ``/metrics`` (vLLM's speculative counters included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.decoding.engine_helpers import save_random_draft
from tests.serve.conftest import _free_port

ROOT = Path(__file__).resolve().parents[2]
AIPERF = Path(os.environ.get("LILICORR_AIPERF", ROOT / ".venv-aiperf" / "bin" / "aiperf"))


def _aiperf_env() -> dict:
    """aiperf 0.13 resolves tokenizers through the hub cache when HF_HUB_OFFLINE is set, which fails for a
    local folder; without it, a local folder loads directly (no network is touched for a local path)."""
    return {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


def test_aiperf_profile_32_requests(tiny_target_dir, tmp_path):
    if not AIPERF.exists():
        pytest.fail(f"{AIPERF} not found: `make test` installs aiperf into .venv-aiperf (make aiperf)")
    save_random_draft(tiny_target_dir, tmp_path / "draft")
    port = _free_port()
    spec = json.dumps({"method": "dflash", "model": str(tmp_path / "draft"), "num_speculative_tokens": 3})
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lilicorr.cli.main",
            "serve",
            str(tiny_target_dir),
            "--speculative-config",
            spec,
            "--port",
            str(port),
            "--served-model-name",
            "tiny",
            "--max-num-seqs",
            "8",
            "--max-model-len",
            "512",
            "--threads",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        out = tmp_path / "aiperf"
        res = subprocess.run(
            [
                str(AIPERF),
                "profile",
                "-m",
                "tiny",
                "--tokenizer",
                str(tiny_target_dir),
                "--url",
                url,
                "--endpoint-type",
                "completions",
                "--streaming",
                "--request-count",
                "32",
                "--concurrency",
                "8",
                "--prompt-input-tokens-mean",
                "32",
                "--prompt-input-tokens-stddev",
                "0",
                "--prompt-output-tokens-mean",
                "16",
                "--prompt-output-tokens-stddev",
                "0",
                "--extra-inputs",
                "ignore_eos:true",
                "--ui",
                "none",
                "--no-gpu-telemetry",
                "--output-artifact-dir",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=_aiperf_env(),
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text())
        flat = json.dumps(summary)
        assert '"request_count"' in flat or "request_count" in flat
        count = summary.get("request_count", {}).get("avg")
        assert count == 32, summary.get("request_count")
        errors = (
            summary.get("error_request_count", {}).get("avg", 0)
            if isinstance(summary.get("error_request_count"), dict)
            else 0
        )
        assert not errors
        scraped = "".join(p.read_text() for p in out.rglob("server_metrics_export*.json"))
        assert "vllm:spec_decode_num_drafts" in scraped
    finally:
        server.terminate()
        server.wait(timeout=30)
