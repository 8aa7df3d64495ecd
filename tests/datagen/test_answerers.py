"""The engine adapters of ``data regenerate`` without their engines (the real ones run in ``make
llamacpp-check`` and ``make compat``): llama-server's answers (EOS it leaves out, order of completion) and
the vLLM worker protocol (READY, jobs on stdin, one JSON line per answer, a dying worker named)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from lilicorr.datagen.answerers import Job, LlamaCppAnswerer, VllmAnswerer

EOS = frozenset({2})


def _jobs(n: int, max_tokens: int = 4) -> list[Job]:
    return [Job(i, [10 + i, 11 + i], float(i % 2), i, max_tokens) for i in range(n)]


class FakeLlamaServer:
    """``complete_ids`` like llama-server: generated ids without the end-of-generation token; later jobs
    may finish first."""

    def __init__(self):
        self.closed = False

    def complete_ids(self, prompt_ids, max_tokens, temperature, seed):
        time.sleep(0.01 * (prompt_ids[0] % 3))
        if prompt_ids[0] % 2:  # odd prompts end at EOS after two tokens (EOS not returned)
            return {"tokens": [7, 8], "stop_type": "eos"}
        return {"tokens": list(range(max_tokens)), "stop_type": "limit"}

    def __exit__(self, *exc):
        self.closed = True


def test_llamacpp_answers_every_job_once_with_eos_restored():
    server = FakeLlamaServer()
    answerer = LlamaCppAnswerer(server, concurrency=3, eos=EOS)
    got = dict((job.index, ids) for job, ids in answerer.answer(_jobs(10)))
    answerer.close()
    assert sorted(got) == list(range(10)) and server.closed
    for i, ids in got.items():
        assert ids == ([7, 8, 2] if (10 + i) % 2 else [0, 1, 2, 3])  # a full-length answer gets no EOS


FAKE_WORKER = """
import json, sys
print("some vLLM log line", flush=True)
print("READY", flush=True)
jobs = [json.loads(x) for x in sys.stdin if x.strip()]
for j in jobs:
    if j["prompt_ids"][0] == 99:
        sys.exit(3)
    print(json.dumps({"index": j["index"], "ids": j["prompt_ids"][::-1][: j["max_tokens"]]}), flush=True)
"""


def _fake_interpreter(tmp_path, source: str):
    """An 'interpreter' that runs ``source`` whatever module it is asked for."""
    worker = tmp_path / "worker.py"
    worker.write_text(source)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {worker}\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def fake_python(tmp_path):
    return _fake_interpreter(tmp_path, FAKE_WORKER)


def test_vllm_worker_protocol(fake_python):
    answerer = VllmAnswerer("unused-target", "float32", 4, 64, python=fake_python)
    got = {job.index: ids for job, ids in answerer.answer(_jobs(5))}
    assert got == {i: [11 + i, 10 + i] for i in range(5)}


def test_vllm_worker_that_dies_is_a_named_error(fake_python):
    answerer = VllmAnswerer("unused-target", "float32", 4, 64, python=fake_python)
    jobs = _jobs(2) + [Job(2, [99, 1], 0.0, 2, 4)]
    with pytest.raises(RuntimeError, match="vLLM worker exited with 3"):
        list(answerer.answer(jobs))


def test_vllm_without_its_venv_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="make compat"):
        VllmAnswerer("t", "float32", 4, 64, python=tmp_path / "nope" / "python")


SPAWNING_WORKER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as vLLM's engine core is
print("READY", flush=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def test_closing_a_vllm_worker_ends_the_processes_it_started(tmp_path):
    """A worker killed alone leaves vLLM's engine processes busy-waiting; close() takes them along."""
    answerer = VllmAnswerer("unused-target", "float32", 4, 64, python=_fake_interpreter(tmp_path, SPAWNING_WORKER))
    child = int(answerer.proc.stdout.readline())
    assert Path(f"/proc/{child}").exists()
    answerer.close()
    for _ in range(50):  # the child is reaped by init once killed; its /proc entry goes soon after
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"child {child} of the closed worker still runs")
    assert answerer.proc.poll() is not None


ENV_WORKER = """
import json, os, sys
print("READY", flush=True)
for x in sys.stdin:
    if x.strip():
        j = json.loads(x)
        print(json.dumps({"index": j["index"], "ids": [int(os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"])]}), flush=True)
"""


@pytest.mark.parametrize("caller, seen", [(None, 0), ("1", 1)])
def test_vllm_worker_shares_the_scheduler_core_unless_told(tmp_path, monkeypatch, caller, seen):
    """vLLM keeps a busy-waiting core for its scheduler; the answerer gives it back (1.3-1.6x on 2 cores)."""
    exe = _fake_interpreter(tmp_path, ENV_WORKER)
    if caller is None:
        monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", caller)
    answerer = VllmAnswerer("unused-target", "float32", 4, 64, python=exe)
    assert [ids for _, ids in answerer.answer(_jobs(1))] == [[seen]]
