"""``lilicorr bench serve``'s runner on the shipped tiny stack: every server up for the whole run, each level
running the arms in turn with the order reversed from one level to the next (so a drift in the machine's speed
reaches every arm alike), the same prompts at every level, and the counters read per level."""

import os
import sys
from pathlib import Path

import pytest

from lilicorr.bench.serve import ServeArm, ServeBenchConfig, run_serve_bench

ROOT = Path(__file__).resolve().parents[2]
TARGET, DRAFT = ROOT / "models/tiny-s", ROOT / "models/tiny-s-dflash"


def test_levels_interleave_arms_in_alternating_order(tmp_path, capsys):
    if not (DRAFT / "config.json").exists():
        pytest.fail(f"{DRAFT} missing: the tiny stack travels in git")
    arms = [ServeArm("plain"), ServeArm("drafter", {"model": str(DRAFT)})]
    cfg = ServeBenchConfig(str(TARGET), arms, concurrencies=[1, 3], requests_per_level=3, max_tokens=8, rounds=2)
    results = run_serve_bench(cfg, tmp_path)
    order = [line.split(" c=")[0] for line in capsys.readouterr().out.splitlines() if " c=" in line]
    # reversed at every level, and each round starts where the last one's order left off
    assert order == ["plain", "drafter", "drafter", "plain", "drafter", "plain", "plain", "drafter"]
    assert len(results["config"]["prompts"]) == 3  # one pool for every level
    assert "LILICORR_OMP_SPIN=" in results["config"]["openmp"]  # the page says how each server waited
    for name in ("plain", "drafter"):
        levels = results["arms"][name]
        assert [(lv["concurrency"], lv["round"]) for lv in levels] == [(1, 0), (1, 1), (3, 0), (3, 1)]
        assert all(lv["errors"] == 0 and lv["output_tokens"] > 0 and lv["rss_mib"] for lv in levels)
        assert [lv["requests"] for lv in levels] == [3, 3, 6, 6]  # at least 2 × concurrency
    assert all(lv["tau"] is None and lv["drafting_steps"] is None for lv in results["arms"]["plain"])
    # the drafter arm runs under the load policy: its decisions per level, as a share of engine steps
    assert all(0.0 <= lv["drafting_steps"] <= 1.0 for lv in results["arms"]["drafter"])
    assert all(0.0 <= lv["corrected_steps"] <= 1.0 for lv in results["arms"]["drafter"])
    assert (tmp_path / "serve.json").exists()


def test_every_arm_starts_as_lilicorr_serve(tmp_path):
    """The fixed arms once started from a module of their own, which skipped ``lilicorr serve``'s choices before
    torch loads (OpenMP's wait, the kernel caches): they inherited the bench's spin and served at 0.74× plain where the
    same server started as ``lilicorr serve`` served at 1.05×. Every arm is now the same command; a fixed arm only adds
    ``--no-load-policy``, which the command turns into a server without the load policy."""
    from lilicorr.bench.serve import OurServer
    from lilicorr.cli.main import build_parser

    cfg = ServeBenchConfig(str(TARGET), [])
    spec = {"model": str(DRAFT)}
    for arm in (ServeArm("plain"), ServeArm("drafter", spec), ServeArm("drafter+fixed", spec, load_policy=False)):
        cmd = OurServer(cfg, arm, tmp_path / "log").cmd
        assert cmd[1:5] == ["-m", "lilicorr.cli.main", "serve", str(TARGET)], cmd
        assert ("--no-load-policy" in cmd) == (not arm.load_policy)
        args = build_parser().parse_args(cmd[3:])
        assert args.load_policy is arm.load_policy


def test_servers_do_not_inherit_the_bench_s_own_openmp_spin(monkeypatch):
    """``lilicorr bench`` may spin OpenMP for itself (cli/openmp.py); a server it starts (a child ``lilicorr serve``
    with the bench's environment) must run as ``lilicorr serve`` does by default. A spin the user set is kept."""
    from lilicorr.cli import openmp
    from lilicorr.cli.openmp import CHOSEN_MARK, openmp_spin

    bench = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "LILICORR_OMP_SPIN", CHOSEN_MARK)}
    monkeypatch.setattr(os, "environ", bench)  # this process's real environment stays untouched
    monkeypatch.setattr(openmp, "competing_cores", lambda: 0.0)  # an idle machine: bench spins
    monkeypatch.delitem(sys.modules, "torch")  # openmp_spin acts only before torch loads
    assert openmp_spin("bench") == "10000" and CHOSEN_MARK in os.environ
    env = dict(bench)  # what OurServer hands the server
    monkeypatch.setattr(os, "environ", env)
    assert openmp_spin("serve") == "0"  # the server decides its own: no spin unless asked
    env.pop(CHOSEN_MARK)
    env["GOMP_SPINCOUNT"] = "10000"  # the user's own setting
    assert openmp_spin("serve") == "10000"
