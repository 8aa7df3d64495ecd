"""Continuous batching: one engine thread steps every running request together.

The HTTP layer only enqueues jobs and reads per-job asyncio queues, so it never blocks the engine,
and the engine never waits on a client. Requests join between steps (up to ``max_num_seqs``; the
rest wait in FIFO order) and leave when they finish or their client goes away (``cancel`` frees
their cache rows at the next step boundary).

A speculative engine runs under the load policy by default (``decoding/policy.py``): each step it
decides from measured costs how many tokens each running request drafts, down to plain steps under
load, so serving with a drafter is not slower than serving without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.request import Request
from lilicorr.serve.metrics import ServerMetrics

log = logging.getLogger("lilicorr.serve")


@dataclass
class Update:
    text: str  # new text since the last update
    num_tokens: int  # output tokens so far
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    # (token id, log-prob, top [(token id, log-prob)]) of the visible tokens new in this update
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)


@dataclass
class Job:
    request: Request
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    sent_chars: int = 0
    hold_back: int = 0  # chars kept back while they could still start a stop string
    t_last: float | None = None
    done: bool = False
    sent_tokens: int = 0  # output tokens whose log-probs were sent

    def push(self, update: Update) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, update)


def _malloc_trim() -> None:
    """Hand freed heap pages back to the OS (glibc). CPU tensors of a batch come and go in sizes that change
    every step, and glibc keeps the freed pages of its heap; trimming when the engine goes idle keeps the
    resident size of a server flat between rounds of load instead of creeping to the largest round's."""
    path = ctypes.util.find_library("c")
    if path is None:
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(path).malloc_trim(0)


class EngineLoop:
    def __init__(self, engine: SpecEngine, metrics: ServerMetrics, max_num_seqs: int = 8, load_policy: bool = True):
        """``load_policy``: a speculative engine plans every step with the load policy (the default);
        False keeps the engine's own configuration (fixed drafts, or its draft gate)."""
        self.engine, self.metrics, self.max_num_seqs = engine, metrics, max_num_seqs
        if load_policy and engine.speculative and engine.policy is None:
            engine.use_load_policy()
        self.waiting: deque[Job] = deque()
        self.running: dict[int, Job] = {}
        self.cancelled: set[int] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="lilicorr-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()
        self.thread.join(timeout=10)

    def submit(self, job: Job) -> None:
        job.hold_back = max((len(s) for s in job.request.params.stop), default=1) - 1
        with self.lock:
            self.waiting.append(job)
        self.metrics.waiting.labels(self.metrics.model_name).set(len(self.waiting))
        self.wake.set()

    def cancel(self, job: Job) -> None:
        with self.lock:
            self.cancelled.add(id(job))
        self.wake.set()

    # -- engine thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stopped:
            try:
                if not self._iteration():
                    self.wake.wait(timeout=0.05)
                    self.wake.clear()
            except Exception as e:  # noqa: BLE001 - never let one bad step kill the server
                log.exception("engine step failed")
                self._fail_all(f"internal engine error: {e}")

    def _iteration(self) -> bool:
        with self.lock:
            cancelled, self.cancelled = self.cancelled, set()
            self.waiting = deque(j for j in self.waiting if id(j) not in cancelled)
            admit = []
            while self.waiting and len(self.running) + len(admit) < self.max_num_seqs:
                admit.append(self.waiting.popleft())
        for key in cancelled & set(self.running):
            job = self.running.pop(key)
            self.engine.cancel(job.request)
            job.done = True
        name = self.metrics.model_name
        if admit:
            for j in admit:
                self.running[id(j)] = j
                self.metrics.prompt_tokens.labels(name).inc(len(j.request.prompt_ids))
            self.engine.add([j.request for j in admit])
            for j in admit:
                self._emit(j)
        elif self.running:
            by_req = {id(j.request): j for j in self.running.values()}
            for req, toks in self.engine.step():
                if toks:
                    self._emit(by_req[id(req)])
            self.metrics.sync_spec(self.engine.stats)
            policy = self.engine.policy
            if policy is not None and policy.last is not None:
                self.metrics.record_plan(policy.last)
                policy.last = None  # shown once
            if not self.running and not self.waiting:
                _malloc_trim()  # the batch just emptied: a natural point to return freed memory
        self.metrics.running.labels(name).set(len(self.running))
        self.metrics.waiting.labels(name).set(len(self.waiting))
        return bool(admit or self.running)

    def _emit(self, job: Job) -> None:
        req, now, name = job.request, time.perf_counter(), self.metrics.model_name
        if job.t_last is None:
            self.metrics.ttft.labels(name).observe(now - req.t_start)
        else:
            self.metrics.itl.labels(name).observe(now - job.t_last)
        job.t_last = now
        text = req.text(self.engine.decode)  # incremental; an incomplete UTF-8 character is held back
        end = len(text)
        if not req.finished:
            end -= job.hold_back
        delta = text[job.sent_chars : max(end, job.sent_chars)]
        job.sent_chars = max(end, job.sent_chars)
        if req.finished:
            self.running.pop(id(job), None)
            job.done = True
            self.metrics.success.labels(name, req.finish_reason or "stop").inc()
            self.metrics.generation_tokens.labels(name).inc(len(req.output_ids))
            self.metrics.e2e.labels(name).observe(now - req.t_start)
        lps = []
        if req.params.logprobs is not None:
            n = len(req.logprobs)
            lps = [
                (req.output_ids[k], *req.logprobs[k])
                for k in range(job.sent_tokens, n)
                if req.visible(req.output_ids[k])
            ]
            job.sent_tokens = n
        job.push(Update(delta, len(req.output_ids), req.finished, req.finish_reason, logprobs=lps))

    def _fail_all(self, message: str) -> None:
        for job in list(self.running.values()):
            self.engine.cancel(job.request)
            job.push(Update("", len(job.request.output_ids), True, "error", error=message))
        self.running.clear()
