"""OpenAI conformance: every field honoured or refused by name, logprobs, and never a 5xx for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lilicorr.serve.protocol import FIELDS
from tests.serve.conftest import MODEL

ROOT = Path(__file__).resolve().parents[2]


def _post(url, path, body, **kw):
    """JSON with ASCII escapes, so lone surrogates travel as the valid JSON text "\\ud800"."""
    return httpx.post(url + path, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=60)


def _drained(loop):
    """No request left in the engine: nothing running, nothing waiting."""
    import time

    for _ in range(200):
        if not loop.running and not loop.waiting and not loop.engine.seqs:
            return True
        time.sleep(0.05)
    return False


def test_completion_logprobs_layout_and_values(server):
    url, loop = server
    r = _post(
        url,
        "/v1/completions",
        {"model": MODEL, "prompt": "def f(x):", "max_tokens": 8, "temperature": 0, "logprobs": 3},
    )
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    lp = ch["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) > 0
    assert "".join(lp["tokens"]) == ch["text"]
    assert lp["text_offset"][0] == 0 and lp["text_offset"][1] == len(lp["tokens"][0])
    for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert val <= 0 and tok in top and len(top) >= 3
        assert max(top.values()) == pytest.approx(val, abs=1e-5)  # greedy: the chosen token is the most likely
    # streamed logprobs are the same, chunk by chunk
    with httpx.stream(
        "POST",
        url + "/v1/completions",
        json={"model": MODEL, "prompt": "def f(x):", "max_tokens": 8, "temperature": 0, "logprobs": 3, "stream": True},
        timeout=60,
    ) as s:
        chunks = [json.loads(x[6:]) for x in s.iter_lines() if x.startswith("data: {")]
    streamed = [
        v
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for v in c["choices"][0]["logprobs"]["token_logprobs"]
    ]
    offsets = [
        v
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for v in c["choices"][0]["logprobs"]["text_offset"]
    ]
    assert streamed == pytest.approx(lp["token_logprobs"], abs=1e-6) and offsets == lp["text_offset"]
    assert _drained(loop)


def test_chat_logprobs_and_top_logprobs(server):
    url, _ = server
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "temperature": 0}
    r = _post(url, "/v1/chat/completions", {**body, "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert content and all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 for c in content)
    assert all(bytes(c["bytes"]).decode() == c["token"] for c in content)
    assert "".join(c["token"] for c in content) == r.json()["choices"][0]["message"]["content"]
    r = _post(url, "/v1/chat/completions", {**body, "logprobs": True})
    assert r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []
    assert _post(url, "/v1/chat/completions", body).json()["choices"][0]["logprobs"] is None
    bad = _post(url, "/v1/chat/completions", {**body, "top_logprobs": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_logprobs"


def test_openai_client_logprobs(server):
    from openai import OpenAI

    url, _ = server
    client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    r = client.completions.create(model=MODEL, prompt="x = ", max_tokens=5, temperature=0, logprobs=2)
    assert len(r.choices[0].logprobs.token_logprobs) == len(r.choices[0].logprobs.tokens) > 0
    c = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=1,
    )
    assert c.choices[0].logprobs.content[0].top_logprobs[0].logprob <= 0


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/completions", {"prompt": "\ud800"}, "prompt"),
        ("/v1/completions", {"prompt": "a", "stop": ["\udfff"]}, "stop"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a\ud800b"}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "alien", "content": "hi"}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages"),
        ("/v1/completions", {"prompt": "a", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "a", "best_of": 3}, "best_of"),
        ("/v1/completions", {"prompt": "a", "echo": True}, "echo"),
        ("/v1/completions", {"prompt": "a", "suffix": "end"}, "suffix"),
        ("/v1/completions", {"prompt": "a", "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {"prompt": "a", "logit_bias": {"5": 10}}, "logit_bias"),
        ("/v1/completions", {"prompt": "a", "logprobs": 21}, "logprobs"),
        ("/v1/completions", {"prompt": "a", "logprobs": True}, "logprobs"),
        ("/v1/completions", {"prompt": "a", "frobnicate": 1}, "frobnicate"),
        ("/v1/completions", {"prompt": "a", "messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "prompt": "x"}, "prompt"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]},
            "tools",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_object"}},
            "response_format",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "logprobs": 3}, "logprobs"),
        ("/v1/completions", {"prompt": "a", "stream_options": {"include_usage": True, "x": 1}}, "stream_options"),
        ("/v1/completions", {"prompt": "a", "stop_token_ids": ["x"]}, "stop_token_ids"),
        ("/v1/completions", {"prompt": "a", "seed": 2**70}, "seed"),
    ],
)
def test_refused_by_name(server, path, extra, param):
    url, loop = server
    r = _post(url, path, {"model": MODEL, "max_tokens": 4, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (
        err["param"] == param and err["type"] == "invalid_request_error" and param in err["message"] + str(err["param"])
    )
    assert _drained(loop)


def test_no_op_values_are_accepted(server):
    url, _ = server
    common = {"n": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "u", "echo": False}
    r = _post(
        url, "/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 3, "best_of": 1, "suffix": None, **common}
    )
    assert r.status_code == 200, r.text
    chat = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}], "max_tokens": 3}
    r = _post(
        url,
        "/v1/chat/completions",
        {
            "model": MODEL,
            **chat,
            **common,
            "tools": [],
            "tool_choice": "none",
            "response_format": {"type": "text"},
            "stream_options": None,
        },
    )
    assert r.status_code == 200, r.text


def test_serving_guide_field_table_lists_every_field():
    guide = (ROOT / "docs" / "guide" / "serving.md").read_text()
    for name in FIELDS:
        assert f"| `{name}` |" in guide, name


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=12,
)
ODD_TEXT = st.sampled_from(["", "\ud800", "a\udfffb", "\x00", "\u2028", "😀" * 50, "x" * 5000, " ", "<|im_end|>"])
FIELD_NAMES = st.sampled_from(sorted(FIELDS) + ["frobnicate", ""])
BODY = st.one_of(
    JSON,
    st.dictionaries(FIELD_NAMES, JSON | ODD_TEXT, max_size=6),
    st.fixed_dictionaries(
        {"model": st.just(MODEL), "max_tokens": st.integers(-2, 6) | JSON},
        optional={
            "prompt": ODD_TEXT | JSON | st.lists(st.integers(-5, 10**6), max_size=5),
            "messages": st.lists(
                st.fixed_dictionaries(
                    {"role": st.sampled_from(["user", "system", "assistant", "x"]) | JSON, "content": ODD_TEXT | JSON}
                ),
                max_size=3,
            )
            | JSON,
            "temperature": JSON,
            "top_p": JSON,
            "logprobs": JSON,
            "top_logprobs": JSON,
            "stop": JSON | ODD_TEXT,
            "stream": st.booleans() | JSON,
            "seed": JSON,
        },
    ),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=BODY, chat=st.booleans())
def test_fuzz_never_a_5xx(server, body, chat):
    url, loop = server
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = httpx.post(url + path, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        err = r.json()["error"]
        assert isinstance(err["message"], str) and err["type"] == "invalid_request_error"
    elif isinstance(body, dict) and body.get("stream") is True:
        assert r.text.rstrip().endswith("data: [DONE]")
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    assert _drained(loop)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"[1, 2]", b'"text"', b"null", b'{"prompt": "a"' + b" " * 10])
def test_malformed_bodies(server, raw):
    url, _ = server
    for path in ("/v1/completions", "/v1/chat/completions"):
        r = httpx.post(url + path, content=raw, headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 400 and "error" in r.json()
