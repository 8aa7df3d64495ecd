"""``exit_with_parent``: a worker whose parent is killed (SIGKILL: no chance to close it) ends, with its children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = """
import subprocess, sys, time
from lilicorr.datagen.parent_watch import exit_with_parent
exit_with_parent(poll_s=0.05)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as vLLM's engine core
print(child.pid, flush=True)
time.sleep(120)
"""

PARENT = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(worker.pid, worker.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return "Z" in stat.read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_worker_ends_with_its_killed_parent_and_takes_its_children():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, WORKER], stdout=subprocess.PIPE, text=True)
    try:
        worker, child = (int(x) for x in parent.stdout.readline().split())
        time.sleep(0.3)
        assert not _gone(worker) and not _gone(child)  # the watch does not fire while the parent lives
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not (_gone(worker) and _gone(child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(worker) and _gone(child), "the orphaned worker or its child still runs"
    finally:
        parent.kill()
