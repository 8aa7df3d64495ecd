"""llama.cpp's own server as a deployment path: start ``llama-server`` with the target GGUF, with or
without a drafter GGUF exported by ``lilicorr export --format gguf``, and run chat prompts through it.

Used by the llama.cpp check (``make llamacpp-check``: text with a drafter identical to text without
one) and by ``benchmarks/llamacpp_speed.py`` (tokens/s and acceptance beside lilicorr's engine).
The binary is built by ``make llamacpp`` from the pinned llama-cpp-python source (``build/llama.cpp``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

LLAMA_SERVER = Path("build/llama.cpp/bin/llama-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Answer:
    id: str
    text: str
    predicted_n: int
    predicted_per_second: float
    draft_n: int = 0
    draft_n_accepted: int = 0

    @property
    def tau(self) -> float:
        """Mean tokens per target step: each verify step emits its accepted drafts plus one token."""
        steps = self.predicted_n - self.draft_n_accepted
        return self.predicted_n / steps if steps > 0 else float("nan")


class LlamaServer:
    """``llama-server`` for one target GGUF, optionally with a DFlash drafter GGUF; a context manager that
    waits for ``/health`` and names the log on failure."""

    def __init__(
        self,
        model: str | Path,
        draft: str | Path | None = None,
        binary: str | Path = LLAMA_SERVER,
        threads: int = 2,
        draft_tokens: int = 7,
        ctx_size: int = 4096,
        log: str | Path | None = None,
    ):
        if not Path(binary).exists():
            raise FileNotFoundError(f"{binary}: llama-server is not built (run `make llamacpp`)")
        for f in (model, draft):
            if f is not None and not Path(f).exists():
                raise FileNotFoundError(f"{f}: GGUF file not found")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd += ["-t", str(threads), "-c", str(ctx_size), "-np", "1", "--no-webui"]
        if draft is not None:
            self.cmd += ["--spec-type", "draft-dflash", "--spec-draft-model", str(draft)]
            self.cmd += ["--spec-draft-n-max", str(draft_tokens), "--spec-draft-n-min", "0"]
        self.log = Path(log) if log else Path(f"runs/llama-server-{self.port}.log")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
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

    def chat(self, row: dict, max_tokens: int) -> Answer:
        """One greedy chat completion (the GGUF's own chat template); llama.cpp's timings and draft counts."""
        body = {"messages": row["messages"], "max_tokens": max_tokens, "temperature": 0, "seed": 0}
        req = urllib.request.Request(
            self.url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            res = json.loads(r.read())
        t = res.get("timings", {})
        return Answer(
            id=str(row.get("id")),
            text=res["choices"][0]["message"]["content"],
            predicted_n=int(t.get("predicted_n", 0)),
            predicted_per_second=float(t.get("predicted_per_second", 0.0)),
            draft_n=int(t.get("draft_n", 0)),
            draft_n_accepted=int(t.get("draft_n_accepted", 0)),
        )


def pooled(answers: list[Answer]) -> dict:
    """Tokens/s over all answers (total tokens / total generation time) and pooled acceptance."""
    n = sum(a.predicted_n for a in answers)
    secs = sum(a.predicted_n / a.predicted_per_second for a in answers if a.predicted_per_second > 0)
    drafted, accepted = sum(a.draft_n for a in answers), sum(a.draft_n_accepted for a in answers)
    steps = n - accepted
    return {
        "tokens": n,
        "tokens_per_s": round(n / secs, 2) if secs else 0.0,
        "draft_tokens": drafted,
        "accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "tau": round(n / steps, 4) if steps > 0 else None,
    }
