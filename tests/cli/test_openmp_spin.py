"""The OpenMP spin choice for decoding commands (``cli.openmp.openmp_spin``). Each case runs in a fresh interpreter
that has not imported torch, as the ``lilicorr`` command does before it dispatches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PROBE = (
    "import json, os, sys; from lilicorr.cli.openmp import openmp_spin; "
    "got = openmp_spin(sys.argv[1]); print(json.dumps([got, os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules]))"
)


def probe(command: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "LILICORR_OMP_SPIN")}
    return subprocess.run([sys.executable, "-c", PROBE, command], env={**base, **env}, capture_output=True, text=True)


def result(command: str, **env: str) -> list:
    done = probe(command, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_explicit_count_is_set_for_decoding_commands_only():
    assert result("generate", LILICORR_OMP_SPIN="2500") == ["2500", "2500", False]
    assert result("bench", LILICORR_OMP_SPIN="0") == ["0", "0", False]
    assert result("train", LILICORR_OMP_SPIN="2500") == [None, None, False]  # training is left as it was


def test_a_server_spins_only_when_asked():
    """``serve`` outlives the moment ``auto`` looks at the machine, so auto leaves it passive."""
    assert result("serve") == ["0", "0", False]
    assert result("serve", LILICORR_OMP_SPIN="10000") == ["10000", "10000", False]


def test_the_users_gomp_spincount_wins():
    assert result("serve", GOMP_SPINCOUNT="123", LILICORR_OMP_SPIN="9999") == ["123", "123", False]


def test_a_bad_setting_is_a_named_error():
    done = probe("generate", LILICORR_OMP_SPIN="fast")
    assert done.returncode != 0
    assert "LILICORR_OMP_SPIN" in done.stderr and "'fast'" in done.stderr


def test_auto_stays_passive_beside_a_competing_process():
    """One busy loop at normal priority on every core: spinning would fight it (2.2× slower steps measured),
    so auto must choose 0."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        got, env, torch_loaded = result("generate")
    finally:
        for p in busy:
            p.kill()
    assert (got, env, torch_loaded) == ("0", "0", False)


def test_competing_cores_counts_normal_priority_work():
    from lilicorr.cli.openmp import competing_cores

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        got = competing_cores(0.05)
    finally:
        busy.kill()
    assert got is not None and got >= 0.7  # one core's worth, less scheduler noise


def test_the_command_line_sets_it_before_torch_loads():
    """``main`` decides before building its parser (registering the commands' options imports torch)."""
    code = (
        "import os, sys; from lilicorr.cli.main import main\n"
        "try:\n    main(['bench', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**env, "LILICORR_OMP_SPIN": "777"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["777", "True"]  # set, and torch was loaded afterwards by the parser
