"""A worker that ends with the process that started it, taking its own children along.

Why: ``data regenerate`` runs vLLM in a worker subprocess, and vLLM's engine-core processes busy-wait. When the
regenerate process ends without closing the worker (killed, or its session cut), the worker and its engine
cores were left running as orphans — measured: an orphaned engine core held a core and 5 GB for 10 minutes and
the next run's vLLM could not get its KV cache. ``VllmAnswerer.close`` covers a clean exit; this covers the rest,
from the worker's side. Imports only the standard library and psutil (it runs inside vLLM's own venv).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

import psutil


def kill_process_tree(pid: int, include_root: bool = True) -> None:
    """SIGKILL a process's descendants (vLLM's engine core and model workers busy-wait, so nothing gentler is
    waited for) and, with ``include_root``, the process itself. Ones already gone are skipped."""
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        kids = root.children(recursive=True)
        if include_root:
            root.kill()
        for kid in kids:
            with contextlib.suppress(psutil.NoSuchProcess):
                kid.kill()


def end_process_tree() -> None:
    """This process's descendants, then this process, at once (not ``sys.exit``: the main thread may be deep in
    a generate call)."""
    kill_process_tree(os.getpid(), include_root=False)
    os._exit(1)


def exit_with_parent(poll_s: float = 1.0, on_orphan: Callable[[], None] = end_process_tree) -> threading.Thread:
    """Watch, from a daemon thread, for this process's parent to change (it died: the process was re-parented to
    init or a subreaper) and then call ``on_orphan``."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        on_orphan()

    t = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    t.start()
    return t
