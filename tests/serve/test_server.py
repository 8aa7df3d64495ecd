"""The server against real clients on a loopback port: openai, raw HTTP, concurrent streams."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.policy import PLAIN_REASONS
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.runtime import TargetRuntime
from tests.serve.conftest import MODEL


@pytest.fixture(scope="module")
def reference(tiny_target_dir):
    target = TargetRuntime.load(tiny_target_dir)
    engine = build_engine(target)

    def greedy_text(prompt: str, max_tokens: int) -> str:
        req = Request(
            target.tokenizer.encode(prompt, add_special_tokens=False),
            SamplingParams(max_tokens=max_tokens),
            eos_ids=frozenset(target.eos_token_ids),
        )
        engine.generate([req])
        return req.text(target.tokenizer.decode)

    return greedy_text


def _client(url):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_models_health_metrics(server):
    url, _ = server
    assert httpx.get(url + "/health").status_code == 200
    data = httpx.get(url + "/v1/models").json()["data"]
    assert data[0]["id"] == MODEL and data[0]["max_model_len"] == 256
    _client(url).completions.create(model=MODEL, prompt="def f(x):", max_tokens=8, temperature=0)
    text = httpx.get(url + "/metrics").text
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:request_success_total",
        "lilicorr:spec_decode_num_paused_steps_total",
        "lilicorr:spec_decode_draft_width",
        "lilicorr:num_requests_drafting",
        "lilicorr:num_requests_paused",
        "lilicorr:spec_decode_draft_tokens_per_step_bucket",
        "lilicorr:spec_decode_policy_steps_total",
        'lilicorr:spec_decode_policy_outcome_factor{action="draft"',
        "lilicorr:spec_decode_policy_corrected_steps_total",
    ):
        assert name in text, name
    steps = [line for line in text.splitlines() if line.startswith("lilicorr:spec_decode_policy_steps_total")]
    assert sum(float(line.split()[-1]) for line in steps) > 0  # the load policy planned the steps
    # every plain step is counted once more by why (a new batch size's first step is "unmeasured", a rule)
    plain = sum(float(line.split()[-1]) for line in steps if 'decision="plain"' in line)
    why = [line for line in text.splitlines() if line.startswith("lilicorr:spec_decode_policy_plain_steps_total")]
    assert sum(float(line.split()[-1]) for line in why) == plain
    assert all(line.split('reason="')[1].split('"')[0] in PLAIN_REASONS for line in why)


def test_load_policy_is_the_default(server):
    """A server with a drafter plans every step with the load policy, which replaces the fixed draft length."""
    _, loop = server
    assert loop.engine.policy is not None and loop.engine.gate is None
    assert loop.engine.policy.n == loop.engine.n == 3


def test_completion_greedy_equals_engine(server, reference):
    url, _ = server
    out = _client(url).completions.create(model=MODEL, prompt="import os\n", max_tokens=20, temperature=0)
    assert out.choices[0].text == reference("import os\n", 20)
    assert out.usage.completion_tokens <= 20 and out.usage.prompt_tokens > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_streaming_completion_with_usage(server, reference):
    url, _ = server
    chunks = list(
        _client(url).completions.create(
            model=MODEL,
            prompt="class A:",
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == reference("class A:", 16)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason in ("length", "stop")


def test_chat_stream_and_non_stream(server):
    url, _ = server
    c = _client(url)
    msgs = [{"role": "user", "content": "Write a function."}]
    full = c.chat.completions.create(model=MODEL, messages=msgs, max_completion_tokens=12, temperature=0)
    parts = list(c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0, stream=True))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == full.choices[0].message.content
    assert full.choices[0].message.role == "assistant"


def test_sampling_with_seed_is_reproducible(server):
    """With fixed drafts a seed gives the same sample. The load policy (paused here) keeps the distribution
    exact but chooses widths from measured times, so a seed fixes the sample only as far as the load repeats."""
    url, loop = server
    policy, loop.engine.policy = loop.engine.policy, None
    try:
        _same_sample_twice(_client(url))
    finally:
        loop.engine.policy = policy


def _same_sample_twice(c) -> None:
    a = c.completions.create(
        model=MODEL, prompt="x = ", max_tokens=10, temperature=1.0, seed=7, top_p=0.9, extra_body={"top_k": 50}
    )
    b = c.completions.create(
        model=MODEL, prompt="x = ", max_tokens=10, temperature=1.0, seed=7, top_p=0.9, extra_body={"top_k": 50}
    )
    assert a.choices[0].text == b.choices[0].text


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ("{not json", 400, "not valid JSON"),
        ({"model": "nope", "prompt": "x"}, 404, "`nope` does not exist"),
        ({"prompt": "x " * 300}, 400, "maximum context length is 256"),
        ({"prompt": "x", "max_tokens": 0}, 400, "'max_tokens' must be >= 1"),
        ({"prompt": "x", "temperature": -1}, 400, "'temperature' must be >= 0"),
        ({"prompt": "x", "n": 2}, 400, "'n' = 2 is not supported"),
        ({"prompt": "x", "max_tokens": "ten"}, 400, "'max_tokens' must be an integer"),
        ({"prompt": 5}, 400, "'prompt' must be a string"),
        ({"prompt": "x", "stop": 3}, 400, "'stop' must be a string"),
        ([1, 2], 400, "must be a JSON object"),
    ],
)
def test_bad_input_gets_4xx_and_server_survives(server, body, status, needle):
    url, _ = server
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(url + "/v1/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert needle in err["message"] and err["type"] == "invalid_request_error"
    assert httpx.get(url + "/health").status_code == 200


def test_bad_chat_messages(server):
    url, _ = server
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"content": "hi"}]})
    assert r.status_code == 400 and "messages[0]" in r.json()["error"]["message"]
    r = httpx.post(url + "/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_64_concurrent_streams_with_disconnects(server, reference):
    """Some clients hang up mid-stream; every other request still completes with the right text."""
    url, loop = server
    prompts = [f"def f{i}(x):\n    return" for i in range(64)]

    async def one(client: httpx.AsyncClient, i: int):
        body = {"prompt": prompts[i], "max_tokens": 12, "temperature": 0, "stream": True}
        text = []
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                text.append(json.loads(line[6:])["choices"][0]["text"])
                if i % 8 == 3 and len(text) >= 2:
                    return None  # disconnect mid-stream
        return "".join(text)

    async def main():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(64)))

    results = asyncio.run(main())
    for i, text in enumerate(results):
        if i % 8 != 3:
            assert text == reference(prompts[i], 12), i
    deadline = time.time() + 10
    while (loop.running or loop.waiting) and time.time() < deadline:
        time.sleep(0.05)
    assert not loop.running and not loop.waiting and not loop.engine.seqs  # cancelled rows were freed


def test_memory_flat_across_500_requests(server):
    import resource

    url, _ = server

    async def burst(n):
        async with httpx.AsyncClient(timeout=120) as client:
            sem = asyncio.Semaphore(16)

            async def one(i):
                async with sem:
                    r = await client.post(url + "/v1/completions", json={"prompt": f"a{i}", "max_tokens": 3})
                    assert r.status_code == 200

            await asyncio.gather(*(one(i) for i in range(n)))

    asyncio.run(burst(100))  # warm-up: allocator pools, caches
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    asyncio.run(burst(500))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 50 * 1024, f"max RSS grew by {(after - before) / 1024:.1f} MiB"
