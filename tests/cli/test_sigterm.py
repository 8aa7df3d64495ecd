"""A command ended by SIGTERM stops what it started (``cli.main.unwind_on_sigterm``): its ``with`` blocks run,
so a benchmark's servers do not outlive it."""

import os
import signal
import subprocess
import sys
import time

CHILD = """
import subprocess, sys, time
from lilicorr.cli.main import unwind_on_sigterm
unwind_on_sigterm()
proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
try:
    print(proc.pid, flush=True)
    time.sleep(120)
finally:
    proc.terminate()
    proc.wait()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"  # a zombie has ended


def test_sigterm_runs_the_cleanup_of_a_command():
    cmd = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    child = int(cmd.stdout.readline())
    assert _alive(child)
    cmd.send_signal(signal.SIGTERM)
    assert cmd.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the server-like child outlived the command"
