"""The campaign driver (``lilicorr train campaign``), its status (``lilicorr train status``) and pause/resume.

The driver only sequences: each segment is a ``train draft`` process (or, for tests, a call in this process),
so a segment that crashes leaves the driver's log intact and a long-lived driver holds no model memory. It
writes ``campaign.jsonl`` (one event a line: start, warm start, segment, engine sample) and ``campaign.pid``
(its process group, for ``lilicorr train pause``: SIGSTOP while a speed benchmark runs, SIGCONT after).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from lilicorr.options import command_line
from lilicorr.training.campaign import Arm, Campaign, arm_config, arm_step, load_campaign, next_segment
from lilicorr.training.campaign_data import cache_progress, prepare_data
from lilicorr.training.campaign_projection import project
from lilicorr.training.curves import read_curve
from lilicorr.training.draft_config import DraftTrainConfig


def _event(camp: Campaign, record: dict) -> None:
    camp.run_dir.mkdir(parents=True, exist_ok=True)
    with (camp.run_dir / "campaign.jsonl").open("a") as log:
        log.write(json.dumps({"time": round(time.time(), 1), **record}) + "\n")
    print(json.dumps(record), flush=True)


def read_events(run_dir: str | Path) -> list[dict]:
    log = Path(run_dir) / "campaign.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_stopped(pid: int) -> bool:
    """Whether the process is stopped (state T: ``train pause`` sent SIGSTOP), so ``train status`` can say
    "paused" rather than "running" for a campaign that is not advancing. False where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")  # the state follows the parenthesised name


def _claim(camp: Campaign) -> None:
    """One driver per campaign folder: a second one would train the same arm twice into one checkpoint."""
    pid_file = camp.run_dir / "campaign.pid"
    if pid_file.exists():
        other = int(pid_file.read_text().split()[0])
        if other != os.getpid() and _pid_alive(other):
            raise RuntimeError(f"{pid_file}: campaign already running as process {other} (stop it first)")
    camp.run_dir.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()} {os.getpgid(0)}\n")


def _yield_cpu() -> int:
    """Make ``nice`` mean what it says. With autogroup scheduling (Linux's default on desktops and these VMs) the
    CPU is shared between *sessions* first, so a niced campaign still takes half the cores from an interactive
    shell beside it; the session's own autogroup niceness is what counts. A campaign started in its own session
    (``setsid nice -n 19 …``) gives its autogroup its niceness. Returns the niceness set (0: nothing done)."""
    niceness, group = os.nice(0), Path("/proc/self/autogroup")
    if niceness <= 0 or os.getsid(0) != os.getpid() or not group.exists():
        return 0  # not niced, or sharing its autogroup with the shell that started it: leave that group alone
    try:
        group.write_text(str(niceness))
    except OSError:
        return 0
    return niceness


def _warm_start_note(arm: Arm) -> dict:
    """What a warm start starts from: the folder and, from its training summary, how it was trained."""
    summary = Path(arm.warm_start or "") / "training_summary.json"
    info = json.loads(summary.read_text()) if summary.exists() else {}
    return {"from": arm.warm_start, "its_steps": info.get("steps"), "its_wall_time_s": info.get("wall_time_s")}


def train_segment(cfg: DraftTrainConfig, log: Path, in_process: bool) -> None:
    if in_process:
        from lilicorr.training.draft import train_draft

        train_draft(cfg, resume=True)
        return
    cmd = [sys.executable, "-m", "lilicorr.cli.main", *shlex.split(command_line("train draft", DraftTrainConfig,
                                                                                asdict(cfg))), "--resume"]  # fmt: skip
    with log.open("a") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"segment failed (exit {done.returncode}): see {log}")


def _engine_sample(camp: Campaign, arm: Arm, step: int) -> dict:
    """τ of the arm's current weights on the fixed prompts, pooled and per category, for each engine method."""
    eng = camp.engine
    assert eng is not None
    out = camp.run_dir / "engine" / arm.name / f"step-{step:07d}"
    names = [arm.name + m for m in arm.engine_methods]
    cmd = [sys.executable, "-m", "lilicorr.cli.main", "bench", "--target", camp.train["target"], "--draft",
           str(camp.arm_out(arm)), "--only", *names, "--prompts", eng.prompts, "--num-prompts", str(eng.num_prompts),
           "--max-new-tokens", str(eng.max_new_tokens), "--temperatures", "0", "--no-sweep", "--dtype", eng.dtype,
           "--threads", str(camp.threads or 2), "--out", str(out)]  # fmt: skip
    log = camp.run_dir / "logs" / f"{arm.name}.engine.log"
    with log.open("a") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
    runs = json.loads((out / "results.json").read_text())["runs"]
    return {
        r["arm"]["name"]: {"tau": r["pooled"]["tau"], "by_category": r["tau_by_category"]}
        for r in runs
        if r["arm"]["name"] in names
    }


def run_campaign(path: str | Path, max_segments: int = 0, in_process: bool = False) -> Campaign:
    """Train segments until every arm has its planned steps (or ``max_segments`` of them ran). Resumes where the
    checkpoints are; a fresh folder starts each arm from its warm start (or from scratch) and logs which."""
    camp = load_campaign(path)
    _claim(camp)
    (camp.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (camp.run_dir / "campaign.toml").write_text(Path(path).read_text())  # status reads the folder alone
    steps = {a.name: arm_step(camp, a) for a in camp.arms}
    _event(camp, {"event": "start", "config": str(path), "steps": steps, "autogroup_nice": _yield_cpu()})
    for record in prepare_data(
        camp.packs, camp.train, camp.threads, camp.run_dir / "logs" / "data.log", camp.prompts, camp.merges, camp.name
    ):
        _event(camp, record)  # a fresh disk: data unpacked, feature caches extended (nothing on a kept disk)
    done = 0
    while (seg := next_segment(camp)) is not None and (not max_segments or done < max_segments):
        arm, step, stop = seg
        if step == 0 and not (camp.arm_run_dir(arm) / "checkpoint.pt").exists():
            kind = "warm_start" if arm.warm_start else "from_scratch"
            _event(camp, {"event": kind, "arm": arm.name, **(_warm_start_note(arm) if arm.warm_start else {})})
        t0 = time.time()
        train_segment(arm_config(camp, arm, stop, arm.warm_start), camp.run_dir / "logs" / f"{arm.name}.log",
                       in_process)  # fmt: skip
        curve = read_curve(camp.arm_run_dir(arm))
        _event(camp, {"event": "segment", "arm": arm.name, "from": step, "to": arm_step(camp, arm),
                      "wall_s": round(time.time() - t0, 1), "val": curve[-1] if curve else None})  # fmt: skip
        done += 1
        eng = camp.engine
        if eng and not in_process and (stop // eng.every > step // eng.every or stop == camp.steps):
            try:  # a failed sample is logged, not fatal: the hours of training go on
                _event(
                    camp, {"event": "engine", "arm": arm.name, "step": stop, "taus": _engine_sample(camp, arm, stop)}
                )
            except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as e:
                _event(camp, {"event": "engine_failed", "arm": arm.name, "step": stop, "error": str(e)[:300]})
    if seg is None:
        _event(camp, {"event": "done", "steps": camp.steps})
    (camp.run_dir / "campaign.pid").unlink(missing_ok=True)
    return camp


def _campaign_of(run: str | Path) -> Campaign:
    """A campaign by its TOML file or by its run folder (the copy the driver keeps there)."""
    run = Path(run)
    return load_campaign(run / "campaign.toml" if run.is_dir() else run)


def _last_logged(run_dir: Path) -> dict:
    """The last step record of the arm's ``train.log`` (ahead of its checkpoint while a segment runs): step and
    training seconds so far."""
    log = run_dir / "train.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return next((json.loads(x) for x in reversed(lines) if x.startswith('{"step"')), {})


def campaign_status(run: str | Path, goal: float | None = None) -> dict:
    """Per arm: steps of the plan, supervised positions, training hours, the latest held-out τ and engine τ, the
    hours left at the arm's measured pace (the plan's ETA: the arms train one after another), and where its
    held-out τ (the walk's for a LiLiCorr arm) is heading — with ``goal``, the steps and hours to reach it."""
    camp = _campaign_of(run)
    events = read_events(camp.run_dir)
    arms, eta = [], 0.0
    for arm in camp.arms:
        curve = read_curve(camp.arm_run_dir(arm)) if (camp.arm_run_dir(arm) / "train.log").exists() else []
        step = arm_step(camp, arm)
        last = curve[-1] if curve else {}
        logged = _last_logged(camp.arm_run_dir(arm))
        pace = logged["elapsed_s"] / logged["step"] if logged.get("step") else None  # s a step, validation excluded
        left_h = (camp.steps - step) * pace / 3600 if pace else None
        eta += left_h or 0.0
        engine = [e for e in events if e.get("event") == "engine" and e.get("arm") == arm.name]
        starts = [e for e in events if e.get("arm") == arm.name and e.get("event") in ("warm_start", "from_scratch")]
        key = "walk_tau_greedy" if any(p.get("walk_tau_greedy") is not None for p in curve) else "tau_greedy"
        heading = project(curve, key, goal)
        heading_dict = None if heading is None else {"tau": key, **heading.as_dict()}
        for which in ("fit", "recent") if heading_dict else ():  # the hours to the goal at the arm's pace
            goal_step = heading_dict[f"goal_step_{which}"]
            if goal_step is not None and pace:
                heading_dict[f"hours_to_goal_{which}"] = round((goal_step - logged.get("step", step)) * pace / 3600, 1)
        arms.append(
            {
                "arm": arm.name,
                "step": step,  # checkpointed: what a cut keeps
                "logged_step": max(step, logged.get("step", 0)),
                "plan": camp.steps,
                "positions": last.get("positions"),
                "hours": round(logged.get("elapsed_s", 0.0) / 3600, 2),
                "heldout_tau": last.get("tau_greedy") or last.get("tau"),
                "heldout_walk_tau": last.get("walk_tau_greedy") or last.get("walk_tau"),
                "engine": engine[-1]["taus"] if engine else None,
                "started": starts[-1]["event"] if starts else None,
                "hours_left": round(left_h, 2) if left_h is not None else None,
                "heading": heading_dict,
            }
        )
    pid_file = camp.run_dir / "campaign.pid"
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    running = pid is not None and _pid_alive(pid)
    paused = running and pid_stopped(pid)
    # an arm with steps left and no pace yet (it has not trained): the plan's ETA is then only a lower bound
    partial = any(a["hours_left"] is None and a["step"] < camp.steps for a in arms)
    return {"campaign": camp.name, "run_dir": str(camp.run_dir), "running": running, "paused": paused, "arms": arms,
            "eta_hours": round(eta, 2), "eta_partial": partial, "features": cache_progress(camp.train)}  # fmt: skip


def signal_campaign(run: str | Path, pause: bool) -> int:
    """SIGSTOP (pause) or SIGCONT (resume) the driver's process group: the driver and its training process.
    Returns the process group signalled."""
    camp = _campaign_of(run)
    pid_file = camp.run_dir / "campaign.pid"
    if not pid_file.exists():
        raise RuntimeError(f"{pid_file}: no campaign running for {camp.run_dir}")
    pid, pgid = map(int, pid_file.read_text().split())
    if not _pid_alive(pid):
        raise RuntimeError(f"{pid_file}: process {pid} is not running (stale file)")
    if pgid == os.getpgid(0):
        raise RuntimeError(f"campaign process group {pgid} is this shell's: start the campaign with setsid")
    os.killpg(pgid, signal.SIGSTOP if pause else signal.SIGCONT)
    return pgid
