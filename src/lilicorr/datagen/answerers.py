"""Who answers the training prompts: the engines behind ``lilicorr data regenerate --engine``.

A drafter learns the *target's* continuations, so every engine here runs the target itself on the
same templated token ids, with the same per-row temperature (0 or 1, plain sampling: no top-k/top-p)
and the same EOS rule; they differ in speed and in numerics:

- ``native``: this project's engine (``SpecEngine`` without a drafter) with continuous batching —
  a finished row is replaced by the next prompt at once, so the batch stays full;
- ``llamacpp``: ``llama-server`` with parallel slots on the target's GGUF (its quantized kernels:
  the source of the GGUF import, but its dot products differ from the dequantized fp32 weights);
- ``vllm``: vLLM's offline ``LLM.generate`` on CPU, run in the compat venv (``make compat``
  installs it) by ``datagen/vllm_worker.py``; vLLM on CPU refuses per-request seeds, so its T=1
  rows are not reproducible row by row;
- ``fixed``: no generation — the dataset's own reference answer (ShareGPT's assistant turn) as
  training text, tokenised after the same template.

Each engine yields ``(job, answer_ids)`` as answers finish, in any order; the caller groups them
into shards. An answer that ended at EOS ends with the EOS id, as the native engine emits it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

ENGINES = ("auto", "native", "llamacpp", "vllm", "fixed")


@dataclass
class Job:
    index: int  # row of the dataset (prompt order after filtering)
    prompt_ids: list[int]
    temperature: float  # 0: greedy, 1: plain sampling
    seed: int
    max_tokens: int
    reference: list[int] | None = None  # the dataset's own answer ids (engine "fixed")


class NativeAnswerer:
    """The project's engine, AR, ``concurrency`` rows in flight (continuous batching)."""

    name = "native"

    def __init__(self, target_dir: str, dtype: str, device: str, concurrency: int, eos: frozenset[int]):
        import torch

        from lilicorr.decoding.build import build_engine
        from lilicorr.runtime.runtime import TargetRuntime

        self.target = TargetRuntime.load(target_dir, dtype=getattr(torch, dtype), device=device)
        self.engine = build_engine(self.target)
        self.concurrency, self.eos = concurrency, eos

    def answer(self, jobs: list[Job]) -> Iterator[tuple[Job, list[int]]]:
        from lilicorr.decoding.request import Request
        from lilicorr.decoding.sampling import SamplingParams

        queue = list(reversed(jobs))
        live: list[tuple[Job, Request]] = []
        # Admit new rows in groups (one prefill per group), not one by one as single rows free up.
        refill = max(1, self.concurrency // 4)
        while queue or live:
            free = self.concurrency - len(live)
            if queue and (free >= refill or not live):
                new = [queue.pop() for _ in range(min(free, len(queue)))]
                reqs = [
                    Request(
                        j.prompt_ids,
                        SamplingParams(max_tokens=j.max_tokens, temperature=j.temperature, seed=j.seed),
                        eos_ids=self.eos,
                    )
                    for j in new
                ]
                self.engine.add(reqs)
                live += list(zip(new, reqs, strict=True))
            self.engine.step()
            still = []
            for job, req in live:
                if req.finished:
                    yield job, list(req.output_ids)
                else:
                    still.append((job, req))
            live = still

    def close(self) -> None:
        pass


class LlamaCppAnswerer:
    """``llama-server`` with ``concurrency`` parallel slots on the target GGUF; one HTTP client thread per slot."""

    name = "llamacpp"

    def __init__(self, server, concurrency: int, eos: frozenset[int]):
        """``server``: a started ``LlamaServer`` (``complete_ids``, closed by ``close``) with ``concurrency`` slots."""
        self.server, self.concurrency, self.eos = server, concurrency, eos

    @classmethod
    def start(cls, gguf: str, threads: int, concurrency: int, context: int, eos: frozenset[int]) -> LlamaCppAnswerer:
        from lilicorr.runtime.llama_server import LlamaServer

        server = LlamaServer(
            gguf, threads=threads, parallel=concurrency, ctx_size=concurrency * context, log="runs/llama-regen.log"
        )
        return cls(server.__enter__(), concurrency, eos)

    def _one(self, job: Job) -> list[int]:
        res = self.server.complete_ids(job.prompt_ids, job.max_tokens, job.temperature, job.seed)
        ids = [int(t) for t in res.get("tokens", [])]
        if res.get("stop_type") == "eos" and (not ids or ids[-1] not in self.eos) and len(ids) < job.max_tokens:
            ids.append(min(self.eos))  # llama.cpp leaves the end-of-generation token out of its answer
        return ids

    def answer(self, jobs: list[Job]) -> Iterator[tuple[Job, list[int]]]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            pending = {}
            todo = iter(jobs)
            for job in todo:
                pending[pool.submit(self._one, job)] = job
                if len(pending) >= 2 * self.concurrency:
                    break
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    job = pending.pop(f)
                    yield job, f.result()
                    nxt = next(todo, None)
                    if nxt is not None:
                        pending[pool.submit(self._one, nxt)] = nxt

    def close(self) -> None:
        self.server.__exit__()


VLLM_PYTHON = Path(".venv-compat/bin/python")


class VllmAnswerer:
    """vLLM's offline engine in the compat venv (a subprocess: vLLM pins its own packages). The worker
    loads the model first and says READY, so its start-up is not counted as answering time."""

    name = "vllm"

    def __init__(self, target_dir: str, dtype: str, concurrency: int, context: int, python: Path = VLLM_PYTHON):
        if not python.exists():
            raise FileNotFoundError(f"{python}: vLLM's venv is missing (run `make compat` once to build it)")
        self.cmd = [str(python), "-m", "lilicorr.datagen.vllm_worker", "--model", target_dir, "--dtype", dtype]
        # answers stream out per generate call of `chunk` jobs: 8 waves of the batch amortise each call's drain
        self.cmd += ["--max-num-seqs", str(concurrency), "--max-model-len", str(context)]
        self.cmd += ["--chunk", str(8 * concurrency)]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4")}
        # vLLM on CPU keeps one core per worker for its scheduler process, which busy-waits there: on a 2-core
        # machine the model then runs on one core. Sharing both cores is 1.3-1.6x faster here (docs/results/
        # smollm2-regen-engines.md: 379 vs 284 / 259 tokens/s, AMD EPYC); a caller's own setting wins.
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "READY":
                break
        else:
            raise RuntimeError(f"vLLM worker exited with {self.proc.wait()} before it was ready: {' '.join(self.cmd)}")

    def answer(self, jobs: list[Job]) -> Iterator[tuple[Job, list[int]]]:
        by_index = {j.index: j for j in jobs}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        for j in jobs:
            row = {
                "index": j.index,
                "prompt_ids": j.prompt_ids,
                "temperature": j.temperature,
                "max_tokens": j.max_tokens,
            }
            self.proc.stdin.write(json.dumps(row) + "\n")
        self.proc.stdin.close()
        for line in self.proc.stdout:
            if line.startswith("{"):
                row = json.loads(line)
                yield by_index[row["index"]], row["ids"]
        if self.proc.wait() != 0:
            raise RuntimeError(f"vLLM worker exited with {self.proc.returncode} (command: {' '.join(self.cmd)})")

    def close(self) -> None:
        """The worker and everything it started: vLLM's engine core and model workers are its children and, left
        behind by a killed worker, keep busy-waiting on the CPU (seen as orphaned ``VLLM::Worker`` processes)."""
        from lilicorr.datagen.parent_watch import kill_process_tree

        kill_process_tree(self.proc.pid)
        self.proc.wait()


class FixedAnswerer:
    """No generation: each job's reference answer, cut at ``max_tokens``."""

    name = "fixed"

    def answer(self, jobs: list[Job]) -> Iterator[tuple[Job, list[int]]]:
        for j in jobs:
            if j.reference is None:
                raise ValueError(f"prompt row {j.index}: engine 'fixed' needs an 'answer' field in the prompts JSONL")
            yield j, j.reference[: j.max_tokens]

    def close(self) -> None:
        pass


def resolve_engine(engine: str) -> str:
    """``auto``: vLLM where its venv is built (the fastest measured here, and token-identical to the native
    engine in fp32 at T=0: benchmarks/regen_engines.py), else the native engine."""
    if engine == "auto":
        return "vllm" if VLLM_PYTHON.exists() else "native"
    return engine


def make_answerer(engine: str, cfg, eos: frozenset[int]):
    """The answerer named ``engine`` (resolved: not ``auto``) for a ``RegenConfig``."""
    if engine == "native":
        return NativeAnswerer(cfg.target, cfg.dtype, cfg.device, cfg.concurrency, eos)
    if engine == "llamacpp":
        gguf = cfg.gguf or str(Path(cfg.target).with_suffix(".gguf"))
        return LlamaCppAnswerer.start(gguf, cfg.threads, cfg.concurrency, cfg.max_prompt_tokens + cfg.new_tokens, eos)
    if engine == "vllm":
        return VllmAnswerer(cfg.target, cfg.dtype, cfg.concurrency, cfg.max_prompt_tokens + cfg.new_tokens)
    if engine == "fixed":
        return FixedAnswerer()
    raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
