"""Torch threads for one target pass: a small pass runs on one thread when OpenMP's threads sleep between operators.

Why: under ``OMP_WAIT_POLICY=PASSIVE`` with no spin (libgomp's spin count is then 0 — what ``lilicorr serve`` runs
with by default, see ``cli/openmp.py``), torch's second thread goes to sleep after every parallel region, and a
one-token SmolLM2 step is some 1 200 small operators (210 of them matrix products): waking the thread for each costs
more than the split work returns. Measured on the 2-core AMD EPYC (bf16, int4 target, 100-token contexts, two runs
of ``python benchmarks/step_threads.py``, session 42), two threads' time over one thread's (above 1: one thread is
faster): a plain step at batch 1 1.63–1.67× (16.3–17.2 against 26.6–28.7 ms), batch 2 1.49–1.82×, batch 4
1.07–1.22×, batch 8 0.98–1.21×, batch 16 0.91–1.02×, batch 32 0.76–0.89×; a 9-token pass at batch 1 1.04–1.37×, a
17-token one 1.08–1.38× (at batch 2 0.97–1.13×), 33 tokens 0.95–1.26×, a 256-token prefill 0.74–0.81×.

Passes alone flatter one thread at batch 4–8: in ``lilicorr bench serve`` (SmolLM2, 16 requests a level, 48 tokens,
the load generator on the same two cores) a first rule of "at most 8 rows" served plain decoding at 0.76–0.83× of
two threads at 8 concurrent requests and 0.93–1.0× at 4 (two rounds). At most ``SMALL_BATCH`` = 2 rows (and
``SMALL_TOKENS`` tokens in all, a tree verify of 17 nodes for two rows) it served, against two threads in the same
hour (two rounds each): plain decoding 46.7–48.8 against 34.2–34.3 tokens/s at one request (1.37–1.43×), 67.2–68.7
against 49.9–53.7 at two, 74.6–78.7 against 75.3–78.9 at four, 91.4–98.8 against 95.0–96.3 at eight; the default
drafter configuration 1.27–1.36× at one and 1.28–1.34× at two requests, level at four and eight.

The drafter's layers follow the same rule (``decoding/draft_side.py``): with its block pass on one thread the
drafter's time (the "draft_backbone" stage) was 6.4 against 7.7–7.9 ms a drafting step of the 16-node tree at batch 1
(two runs each, 9 prompts, 32 tokens, ``LILICORR_OMP_SPIN=0 lilicorr bench``); the fusion of taps, small passes too,
follows the rule unmeasured on its own; its LM head over the block's rows, one large product, measured the same on
either and keeps the configured threads. The LiLiCorr head's pass over the lattice (``decoding/methods/lilicorr.py``)
follows the rule by rows: 4.7–4.9 → 3.3–3.4 ms a drafting step at batch 1 (Zen 4, session 43, two runs).

The target's LM head inside such a pass is one large product (SmolLM2: 49 152 × 576), whose split pays for the one
wake-up: it runs on the threads the pass set aside (``head_on_pass_threads``). Measured on a 2-core Zen 4 EPYC
(session 43, the head alone, the second thread asleep before each call): 1 row 3.2–3.7 → 2.0–2.3 ms, 17 rows 6.5 →
3.5 ms; whole passes, interleaved, two runs: 1.04–1.05× at 1 row, 0.99–1.04× at 17.

With the spin on (``GOMP_SPINCOUNT`` > 0: ``generate`` and ``bench`` on an idle machine) the second thread stays
awake and two threads win at every size (a plain step 14.5 against 16.9 ms), so nothing changes there.
``LILICORR_STEP_THREADS=0`` turns the rule off.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from lilicorr.runtime.switches import switch_on

SMALL_BATCH = 2
SMALL_TOKENS = 36
ENV = "LILICORR_STEP_THREADS"


def sleeping_openmp() -> bool:
    """OpenMP's idle threads sleep at once: ``OMP_WAIT_POLICY=PASSIVE`` and no positive ``GOMP_SPINCOUNT`` (libgomp
    reads both when torch loads it; without PASSIVE it spins for a while by default)."""
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() != "passive":
        return False
    spin = os.environ.get("GOMP_SPINCOUNT", "").strip()
    return not spin or spin == "0"


def one_thread_for(batch: int, tokens: int) -> bool:
    """Whether a target pass of ``batch`` rows × ``tokens`` new tokens a row runs faster on one thread."""
    return (
        switch_on(ENV)
        and batch <= SMALL_BATCH
        and batch * tokens <= SMALL_TOKENS
        and torch.get_num_threads() > 1
        and sleeping_openmp()
    )


_pass = threading.local()  # .threads: the count a one-thread pass set aside (None outside one)


@contextmanager
def step_threads(batch: int, tokens: int) -> Iterator[None]:
    """Run the enclosed pass on one thread when ``one_thread_for`` says so, restoring the count after."""
    if not one_thread_for(batch, tokens):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    _pass.threads = before
    try:
        yield
    finally:
        _pass.threads = None
        torch.set_num_threads(before)


def head_on_pass_threads(head: torch.nn.Module) -> None:
    """Hooks on ``head`` (the target's LM head): inside a one-thread pass it runs on the count the pass set aside;
    elsewhere (a pass on every thread, the drafter's use of the same head) the hooks change nothing."""

    def before(module: torch.nn.Module, args: tuple) -> None:
        if getattr(_pass, "threads", None):
            torch.set_num_threads(_pass.threads)

    def after(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:
        if getattr(_pass, "threads", None):
            torch.set_num_threads(1)

    head.register_forward_pre_hook(before)
    head.register_forward_hook(after)
