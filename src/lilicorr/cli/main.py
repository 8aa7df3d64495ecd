"""``lilicorr`` command line: one module per command group, each a thin adapter over the library.

Modules import their heavy dependencies inside the handlers, so ``lilicorr --help`` is instant and a
command fails with a clear message about its own inputs instead of an unrelated import error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from lilicorr.cli.kernel_caches import bound_kernel_caches
from lilicorr.cli.openmp import openmp_spin

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _env(args: argparse.Namespace) -> int:
    """This machine as far as a figure depends on it: versions, threads, CPU and its bf16 support."""
    from lilicorr.runtime.machine import machine_info

    print(json.dumps(machine_info(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from lilicorr.cli import bench, data, export, generate, inspect, serve, target, train

    p = argparse.ArgumentParser(prog="lilicorr", description="LiLiCorr speculative decoding toolkit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    s = sub.add_parser("env", help="print this machine's versions, threads and CPU (quote it beside any figure)")
    s.set_defaults(func=_env)
    for module in (data, target, train, serve, bench, export, inspect, generate):
        module.register(sub)
    return p


def unwind_on_sigterm() -> None:
    """SIGTERM (``kill``, a session or job manager ending us) unwinds the command like an exception, so its
    ``with`` blocks and ``finally`` clauses run: the servers a benchmark started are stopped and half-written
    files are removed. Python's default ends the process at once — measured: a ``lilicorr bench serve`` ended
    by SIGTERM left three ``lilicorr serve`` processes and a llama-server running (session 36). ``serve``
    itself is unaffected: uvicorn installs its own graceful handler while it runs."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    unwind_on_sigterm()
    words = sys.argv[1:] if argv is None else argv
    # before the parser: registering the commands' options imports torch, and OpenMP reads its environment then
    command = next((w for w in words if not w.startswith("-")), "")
    openmp_spin(command)
    bound_kernel_caches(command)  # likewise: oneDNN and ideep size their caches at the first matmul
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `lilicorr train status RUN | head`: the reader left, which is not an error
        # Python would report the pipe again when it flushes stdout at exit; point stdout at nothing instead
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
