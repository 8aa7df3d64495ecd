"""The kernel-cache bound for decoding commands (``cli.kernel_caches.bound_kernel_caches``). Each case runs in a fresh
interpreter that has not imported torch, as the ``lilicorr`` command does before it dispatches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lilicorr.cli.kernel_caches import CACHE_ENTRIES, CACHE_VARIABLES

PROBE = (
    "import json, sys; from lilicorr.cli.kernel_caches import bound_kernel_caches; "
    "print(json.dumps(bound_kernel_caches(sys.argv[1])))"
)
AFTER_TORCH = "import torch; " + PROBE


def probe(command: str, code: str = PROBE, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    return subprocess.run([sys.executable, "-c", code, command], env={**base, **env}, capture_output=True, text=True)


def result(command: str, code: str = PROBE, **env: str) -> dict:
    done = probe(command, code, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_decoding_commands_get_the_bound_and_others_keep_torch_s_default():
    bounded = {name: str(CACHE_ENTRIES) for name in CACHE_VARIABLES}
    for command in ("serve", "generate", "bench"):
        assert result(command) == bounded
    assert result("train") == dict.fromkeys(CACHE_VARIABLES)


def test_a_size_the_user_chose_is_kept():
    got = result("serve", LRU_CACHE_CAPACITY="512")
    assert got == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(CACHE_ENTRIES), "LRU_CACHE_CAPACITY": "512"}


def test_nothing_is_set_once_torch_has_loaded():
    assert result("serve", AFTER_TORCH) == dict.fromkeys(CACHE_VARIABLES)


def test_a_zero_ideep_cache_is_refused_by_name():
    done = probe("serve", LRU_CACHE_CAPACITY="0")
    assert done.returncode != 0 and "LRU_CACHE_CAPACITY=0" in done.stderr
