"""``lilicorr bench serve``: servers under load, measured from the client side as a user sees them.

Each arm is a server started as a subprocess on a loopback port — ``lilicorr serve`` (plain, or a
speculative config: the load policy is its default; ``fixed`` arms run the config as given, without it)
or llama-server ``-np N`` — and is driven at every concurrency with the same fixed prompt set (ShareGPT,
MT-Bench and HumanEval in turn, temperatures in turn), streamed chat completions. Per level: output
tokens/s, requests/s, TTFT and inter-chunk latency p50/p99, τ (from the server's own counters) and the
server's resident memory. Results go to ``serve.json``; ``serve_page.write_serve_page`` makes the page and a
plot per metric (``report.py`` for the static bench). ``rounds`` repeats every level, for medians and paired
ratios (one round's cells vary by ±15 % on a 2-core machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lilicorr.data.prompt_sets import load_set, read_prompt_rows, round_robin
from lilicorr.runtime.llama_server import LlamaServer, free_port

SHAREGPT = Path("data/prompts/sharegpt.jsonl")
SLOT_CTX = 2048  # llama-server: context per slot (its -c is shared by the -np slots)


@dataclass
class ServeArm:
    """One server: ``spec`` a vLLM-style speculative config (None: plain); ``load_policy`` False runs the config
    as given; ``llama_gguf`` set: llama-server on that GGUF (``llama_draft``: with a DFlash drafter GGUF)."""

    name: str
    spec: dict | None = None
    load_policy: bool = True
    llama_gguf: str | None = None
    llama_draft: str | None = None


@dataclass
class ServeBenchConfig:
    target: str
    arms: list[ServeArm]
    concurrencies: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    requests_per_level: int = 64  # at least 2 × concurrency is used
    max_tokens: int = 128
    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.7, 1.0])
    threads: int = 2
    seed: int = 0
    level_timeout_s: float = 1800.0  # a level that takes longer is cut and reported as such
    rounds: int = 1  # every level this many times (serve_page: medians and ratios paired by round)


def serve_prompts(n: int) -> list[dict]:
    """``n`` chat rows taken in turn from ShareGPT (the project's copy), MT-Bench and HumanEval."""
    sets = [round_robin(read_prompt_rows(SHAREGPT), n)] if SHAREGPT.exists() else []
    sets += [round_robin(load_set("mt-bench"), n), round_robin(load_set("humaneval"), n)]
    rows = [s[i] for i in range(n) for s in sets if i < len(s)]
    return [{"id": r["id"], "messages": r.get("messages") or [{"role": "user", "content": r["prompt"]}]} for r in rows][
        :n
    ]


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(int(q * (len(s) - 1) + 0.5), len(s) - 1)]


async def drive(url: str, model: str, prompts: list[dict], concurrency: int, n: int, cfg: ServeBenchConfig) -> dict:
    """``n`` streamed chat requests, ``concurrency`` in flight; the client's view of one level."""
    import httpx

    sem = asyncio.Semaphore(concurrency)
    ttft, itl, tpot, tokens = [], [], [], []
    kinds: dict[str, int] = {}  # what failed: a failed request is named, not only counted

    def failed(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    async def one(client: httpx.AsyncClient, i: int) -> None:
        body = {
            "model": model,
            "messages": prompts[i % len(prompts)]["messages"],
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperatures[i % len(cfg.temperatures)],
            "seed": cfg.seed + i,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with sem:
            t0, first, last, used = time.perf_counter(), None, None, None
            try:
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        reply = (await r.aread()).decode(errors="replace")
                        failed(f"HTTP {r.status_code}: {' '.join(reply.split())[:160]}")
                        return
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        used = chunk.get("usage") or used
                        if chunk.get("choices") and (chunk["choices"][0].get("delta") or {}).get("content"):
                            now = time.perf_counter()
                            if first is None:
                                first = now
                                ttft.append(now - t0)
                            else:
                                itl.append(now - last)
                            last = now
            except httpx.HTTPError as e:
                failed(f"{type(e).__name__}: {str(e)[:160]}")
                return
            tokens.append(int(used["completion_tokens"]) if used else 0)
            if first is not None and tokens[-1] > 1:  # vLLM's TPOT: the stream's time per token after the first
                tpot.append((last - first) / (tokens[-1] - 1))

    t0 = time.perf_counter()
    # a fresh connection for every request: reusing a kept-alive one that the server has closed fails the next request
    # with "Server disconnected without sending a response" — against plain llama-server at c=1-2, 16 of 144 requests
    # with httpx's pool against 0 of 144 without it (session 33); the same rule for every arm
    async with httpx.AsyncClient(
        timeout=cfg.level_timeout_s, limits=httpx.Limits(max_keepalive_connections=0)
    ) as client:
        await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(n))), cfg.level_timeout_s)
    wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency,
        "requests": n,
        "errors": sum(kinds.values()),
        "error_kinds": kinds,
        "wall_s": round(wall, 3),
        "output_tokens": sum(tokens),
        "output_tok_s": round(sum(tokens) / wall, 3),
        "req_s": round(len(tokens) / wall, 4),
        **{f"ttft_p{q}": _pct(ttft, q / 100) for q in (50, 99)},
        **{f"itl_p{q}": _pct(itl, q / 100) for q in (50, 99)},
        **{f"tpot_p{q}": _pct(tpot, q / 100) for q in (50, 99)},
    }


POLICY_STEPS = "lilicorr:spec_decode_policy_steps_total"
CORRECTED_STEPS = "lilicorr:spec_decode_policy_corrected_steps_total"


def _scrape(url: str) -> dict[str, float]:
    """Summed counters of ``/metrics`` (our server: vLLM's names, and the load policy's steps by decision); {}
    where there are none."""
    import httpx

    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_") and "_total" in line and "per_pos" not in line:
            key = line.split("{")[0].split(" ")[0]
        elif line.startswith(POLICY_STEPS + "{"):  # the load policy's decisions, by decision="draft|plain"
            key = POLICY_STEPS + ":" + line.split('decision="', 1)[1].split('"', 1)[0]
        elif line.startswith(CORRECTED_STEPS + "{"):
            key = CORRECTED_STEPS
        else:
            continue
        out[key] = out.get(key, 0.0) + float(line.split()[-1])
    return out


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


class OurServer:
    """``lilicorr serve`` in a subprocess (``fixed`` arms: ``--no-load-policy``). Every arm starts through the same
    command, so each makes the command's own choices before torch loads (OpenMP's wait, the kernel caches): the fixed
    arms once started from a module of their own that skipped them, inherited this benchmark's spin and ran at
    0.74× plain serving where the same server started as ``lilicorr serve`` ran at 1.05× (session 46)."""

    def __init__(self, cfg: ServeBenchConfig, arm: ServeArm, log: Path):
        self.port, self.log = free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "lilicorr.cli.main", "serve", cfg.target, "--port", str(self.port)]
        self.cmd += [] if arm.load_policy else ["--no-load-policy"]
        self.cmd += ["--served-model-name", "bench", "--max-num-seqs", str(max(cfg.concurrencies))]
        self.cmd += ["--threads", str(cfg.threads)]
        if arm.spec is not None:
            self.cmd += ["--speculative-config", json.dumps(arm.spec)]

    def __enter__(self) -> OurServer:
        import httpx

        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log: {self.log}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"server did not become healthy; log: {self.log}")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _server(cfg: ServeBenchConfig, arm: ServeArm, out: Path):
    if arm.llama_gguf is None:
        return OurServer(cfg, arm, out / "logs" / f"{arm.name}.log")
    return LlamaServer(
        arm.llama_gguf,
        arm.llama_draft,
        threads=cfg.threads,
        ctx_size=SLOT_CTX * max(cfg.concurrencies),
        parallel=max(cfg.concurrencies),
        log=out / "logs" / f"{arm.name}.log",
    )


def _level(srv, cfg: ServeBenchConfig, prompts: list[dict], c: int) -> dict:
    """One arm at one concurrency: the client's view, plus τ from the server's counters and its memory."""
    n = max(cfg.requests_per_level, 2 * c)
    before = _scrape(srv.url)
    level = asyncio.run(drive(srv.url, "bench", prompts, c, n, cfg))
    after = _scrape(srv.url)
    drafts, acc = (
        after.get(k, 0) - before.get(k, 0)
        for k in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total")
    )
    level["tau"] = round(1 + acc / drafts, 4) if drafts else None
    # how often the load policy drafted: a level that loses to plain serving reads differently when it drafted on
    # every step (drafting did not pay) than when it hardly drafted (the policy's own overhead)
    draft, plain = (
        after.get(f"{POLICY_STEPS}:{d}", 0) - before.get(f"{POLICY_STEPS}:{d}", 0) for d in ("draft", "plain")
    )
    level["drafting_steps"] = round(draft / (draft + plain), 4) if draft + plain else None
    # how often its decision could use the outcome correction (both actions measured lately at that batch size)
    corrected = after.get(CORRECTED_STEPS, 0) - before.get(CORRECTED_STEPS, 0)
    level["corrected_steps"] = round(corrected / (draft + plain), 4) if draft + plain else None
    level["rss_mib"] = _rss_mib(srv.proc.pid)
    return level


def run_serve_bench(cfg: ServeBenchConfig, out: Path) -> dict:
    """Every arm at every concurrency; writes ``serve.json`` after each level (a partial run keeps what it has).

    Every server is started first and stays up (an idle one sleeps); each level then runs the arms one after
    the other, the order reversed from one level to the next, so whatever else changes on the machine during a
    run reaches every arm alike. Every level draws on the same ``requests_per_level`` prompts, in turn, so levels
    differ in load, not in prompts. A server decides its own OpenMP spin (``cli/openmp.py``), as ``lilicorr
    serve`` started by hand does, not the one this bench chose for itself."""
    out.mkdir(parents=True, exist_ok=True)
    prompts = serve_prompts(cfg.requests_per_level)
    spin = os.environ.get("LILICORR_OMP_SPIN", "auto")
    openmp = (f"our servers make `lilicorr serve`'s own choice (LILICORR_OMP_SPIN={spin}; `auto`: no spin, the "
              "PASSIVE wait); llama-server runs with llama.cpp's own OpenMP defaults")  # fmt: skip
    results = {"config": {**asdict(cfg), "prompts": [p["id"] for p in prompts], "openmp": openmp}, "arms": {}}
    with contextlib.ExitStack() as stack:
        servers = [(arm, stack.enter_context(_server(cfg, arm, out))) for arm in cfg.arms]
        for _, srv in servers:
            asyncio.run(drive(srv.url, "bench", prompts, 1, 2, cfg))  # warm-up, not recorded: first-call costs
        for r in range(cfg.rounds):
            for i, c in enumerate(cfg.concurrencies):
                for arm, srv in servers if (i + r) % 2 == 0 else servers[::-1]:
                    level = {**_level(srv, cfg, prompts, c), "round": r}
                    results["arms"].setdefault(arm.name, []).append(level)
                    (out / "serve.json").write_text(json.dumps(results, indent=1))
                    where = f"c={c}" + (f" round {r + 1}/{cfg.rounds}" if cfg.rounds > 1 else "")
                    print(f"{arm.name} {where}: {level['output_tok_s']} tok/s, errors {level['errors']}", flush=True)
    for levels in results["arms"].values():
        levels.sort(key=lambda lv: (lv["concurrency"], lv["round"]))
    return results
