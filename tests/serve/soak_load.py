"""One round of the soak's mixed load (greedy and sampled, a quarter streamed and cut by the client after the first
chunk), shared by the in-process soak (everything released) and the ``lilicorr serve`` soak (memory)."""

from __future__ import annotations

import asyncio
import json

import httpx

REQUESTS, CONCURRENCY = 24, 8
TEMPERATURES = (0.0, 0.7, 1.0)


async def _round(url: str, model: str) -> int:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(client: httpx.AsyncClient, i: int) -> bool:
        body = {
            "model": model,
            "prompt": f"request {i}: def f{i}(x):",
            "max_tokens": 12,
            "temperature": TEMPERATURES[i % 3],
            "seed": i,
        }
        async with sem:
            if i % 4:
                res = await client.post(url + "/v1/completions", json=body)
                assert res.status_code == 200, res.text
                return False
            async with client.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as res:
                async for line in res.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]" and json.loads(line[6:])["choices"]:
                        return True  # cut after the first chunk
            return False

    async with httpx.AsyncClient(timeout=60) as client:
        cut = await asyncio.gather(*(one(client, i) for i in range(REQUESTS)))
    return sum(cut)


def soak_round(url: str, model: str) -> int:
    """Run one round; return how many requests the client cut."""
    return asyncio.run(_round(url, model))
