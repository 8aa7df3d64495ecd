"""``llama-server`` (llama.cpp's own server) as a subprocess: started on a free loopback port, waited
for on ``/health``, stopped on exit, its log named on failure.

Two users: the llama.cpp deployment path (``bench/llamacpp.py``: a target GGUF with or without a
DFlash drafter GGUF, chat prompts) and bulk answer generation for drafter training data
(``datagen/answerers.py``: ``parallel`` slots with continuous batching, token ids in and out, so
the answers are the target's tokens without a detokenise/retokenise round trip).
The binary is built by ``make llamacpp`` from the pinned llama-cpp-python source (``build/llama.cpp``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

LLAMA_SERVER = Path("build/llama.cpp/bin/llama-server")

# Plain sampling from the model's distribution: llama.cpp's defaults (top-k 40, top-p 0.95, min-p 0.05,
# …) would truncate it, and training data must come from the target's own distribution.
PLAIN_SAMPLING = {
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "mirostat": 0,
}


def llama_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment llama-server runs in: ours without the OpenMP settings we chose for torch, plus ``extra``.

    Our commands export ``OMP_WAIT_POLICY=PASSIVE`` (and may set ``GOMP_SPINCOUNT``) so that torch's idle
    threads sleep beside other jobs (``cli/openmp.py``). llama-server is llama.cpp's program and is measured as
    its users run it, with libgomp's default wait: in llama.cpp's OpenMP build every graph node ends in
    ``#pragma omp barrier``, and under PASSIVE each one puts the second thread to sleep and wakes it again. On
    the 2-core AMD EPYC that cut SmolLM2-135M Q4_1 from 171 to 51 tokens/s and a drafting cycle by less, so
    speculation looked about 2x better against llama.cpp's AR than a user sees (docs/results/smollm2-llamacpp-notes.md;
    ``benchmarks/llamacpp_omp_env.py``). ``extra`` may set them again, to reproduce a measurement."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "KMP_"))}
    return {**env, **(extra or {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``llama-server`` for one target GGUF, optionally with a DFlash drafter GGUF; a context manager that
    waits for ``/health`` and names the log on failure. ``parallel`` slots share ``ctx_size`` equally."""

    def __init__(
        self,
        model: str | Path,
        draft: str | Path | None = None,
        binary: str | Path = LLAMA_SERVER,
        threads: int = 2,
        draft_tokens: int = 7,
        ctx_size: int = 4096,
        parallel: int = 1,
        log: str | Path | None = None,
        spec_type: str | None = None,
        env: dict[str, str] | None = None,
    ):
        """``draft``: a DFlash drafter GGUF (``--spec-type draft-dflash``; a LiLiCorr or DFlash2 drafter is a
        DFlash GGUF too); ``spec_type`` without a draft: one of llama.cpp's model-free speculations (e.g.
        ``ngram-simple``); ``env``: extra environment of the server process (e.g. ``LLAMA_LILICORR_DUMP``), on top
        of ``llama_env``'s (llama.cpp's own OpenMP defaults, whatever our process exported)."""
        if not Path(binary).exists():
            raise FileNotFoundError(f"{binary}: llama-server is not built (run `make llamacpp`)")
        for f in (model, draft):
            if f is not None and not Path(f).exists():
                raise FileNotFoundError(f"{f}: GGUF file not found")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd += ["-t", str(threads), "-c", str(ctx_size), "-np", str(parallel), "--no-webui"]
        if parallel > 1:
            self.cmd += ["-b", str(max(2048, ctx_size // parallel)), "--cont-batching"]
        if draft is not None:
            self.cmd += ["--spec-type", "draft-dflash", "--spec-draft-model", str(draft)]
            self.cmd += ["--spec-draft-n-max", str(draft_tokens), "--spec-draft-n-min", "0"]
        elif spec_type is not None:
            self.cmd += ["--spec-type", spec_type]
        self.log = Path(log) if log else Path(f"runs/llama-server-{self.port}.log")
        self.env = llama_env(env)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}; log: {self.log}\n{self._tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"llama-server did not become healthy in 180 s; log: {self.log}\n{self._tail()}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _tail(self, n: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def post(self, route: str, body: dict, timeout: float = 600) -> dict:
        req = urllib.request.Request(self.url + route, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def complete_ids(self, prompt_ids: list[int], max_tokens: int, temperature: float, seed: int) -> dict:
        """Raw completion of token ids (no template applied here: the ids already carry it).

        Returns llama.cpp's answer with ``tokens`` (the generated ids) and ``stop_type``
        (``eos`` / ``limit`` / ``word``); sampling is plain (``PLAIN_SAMPLING``) at ``temperature``."""
        body = {
            "prompt": prompt_ids,
            "n_predict": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "return_tokens": True,
            "cache_prompt": False,
            **PLAIN_SAMPLING,
        }
        return self.post("/completion", body)
