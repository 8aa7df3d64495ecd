"""The issue's memory bound on the real command: ``lilicorr serve`` (tiny target, random DFlash drafter, the load
policy) in its own process, 12 rounds of mixed load (tests/serve/soak_load.py); resident size after the last round
within 5 % of the third, nothing left running. Without the kernel-cache bound (cli/kernel_caches.py) this grew
6–8 % here and 24 % on SmolLM2-135M (docs/results/smollm2-serving-notes.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import psutil

from tests.decoding.engine_helpers import save_random_draft
from tests.serve.conftest import _free_port
from tests.serve.soak_load import soak_round

ROUNDS, WARMUP = 12, 3  # the issue: round 10 against round 3; the last round here


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_lilicorr_serve_resident_size_is_flat_after_warm_up(tiny_target_dir, tmp_path):
    draft = tmp_path / "draft"
    save_random_draft(tiny_target_dir, draft)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    spec = json.dumps({"method": "dflash", "model": str(draft), "num_speculative_tokens": 3})
    cmd = [sys.executable, "-m", "lilicorr.cli.main", "serve", str(tiny_target_dir), "--speculative-config", spec]
    cmd += ["--port", str(port), "--served-model-name", "tiny", "--max-num-seqs", "8", "--max-model-len", "256"]
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "server did not come up in 120 s"
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        rss = []
        for _ in range(ROUNDS):
            assert soak_round(url, "tiny") > 0
            time.sleep(0.3)  # cut streams are released by the engine loop's next step
            rss.append(psutil.Process(proc.pid).memory_info().rss)
        metrics = httpx.get(url + "/metrics").text
    finally:
        proc.terminate()
        proc.wait(30)
    assert _metric(metrics, "vllm:num_requests_running") == 0 and _metric(metrics, "vllm:num_requests_waiting") == 0
    mib = [round(x / 2**20, 1) for x in rss]
    assert rss[-1] - rss[WARMUP - 1] <= 0.05 * rss[WARMUP - 1], f"resident MiB per round: {mib}"
