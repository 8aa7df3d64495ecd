"""OpenAI-compatible HTTP API over the engine loop (FastAPI + uvicorn)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lilicorr.decoding.request import Request as GenRequest
from lilicorr.serve.loop import EngineLoop, Job, Update
from lilicorr.serve.protocol import (
    ParsedRequest,
    RequestError,
    chat_prompt,
    check_fields,
    completion_prompt,
    parse_common,
)


def create_app(loop: EngineLoop, model_name: str, max_model_len: int) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if not loop.thread.is_alive():
            loop.start()
        yield
        loop.stop()

    app = FastAPI(title="lilicorr", version="0.1.0", lifespan=lifespan)
    tokenizer = loop.engine.target.tokenizer
    eos = frozenset(loop.engine.target.eos_token_ids)
    created = int(time.time())

    @app.exception_handler(RequestError)
    async def _request_error(_req: Request, exc: RequestError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/health")
    async def health():
        return Response(status_code=200 if loop.thread.is_alive() else 503)

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": "lilicorr",
                    "max_model_len": max_model_len,
                }
            ],
        }

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(loop.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def _body(req: Request) -> dict:
        try:
            body = json.loads(await req.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        return body

    def _submit(parsed: ParsedRequest) -> Job:
        gen = GenRequest(parsed.prompt_ids, parsed.params, id=uuid.uuid4().hex, eos_ids=eos)
        job = Job(request=gen, loop=asyncio.get_running_loop())
        loop.submit(job)
        return job

    async def _collect(job: Job, http: Request) -> tuple[str, Update, list]:
        text, lps = [], []
        while True:
            try:
                upd: Update = await asyncio.wait_for(job.queue.get(), timeout=0.5)
            except TimeoutError:
                if await http.is_disconnected():
                    loop.cancel(job)
                    raise asyncio.CancelledError from None
                continue
            text.append(upd.text)
            lps.extend(upd.logprobs)
            if upd.finished:
                return "".join(text), upd, lps

    def _tok(t: int) -> str:
        return tokenizer.decode([t])

    def _completion_logprobs(entries: list, offset: int) -> dict:
        """OpenAI completions layout; ``offset``: text offset of the first entry."""
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t, lp, top in entries:
            s = _tok(t)
            out["tokens"].append(s)
            out["token_logprobs"].append(lp)
            top_d = {_tok(i): v for i, v in top}
            top_d.setdefault(s, lp)
            out["top_logprobs"].append(top_d)
            out["text_offset"].append(offset)
            offset += len(s)
        return out

    def _chat_logprobs(entries: list) -> dict:
        def item(t: int, lp: float) -> dict:
            s = _tok(t)
            return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}

        return {"content": [{**item(t, lp), "top_logprobs": [item(i, v) for i, v in top]} for t, lp, top in entries]}

    def _usage(job: Job, upd: Update) -> dict:
        p = len(job.request.prompt_ids)
        return {"prompt_tokens": p, "completion_tokens": upd.num_tokens, "total_tokens": p + upd.num_tokens}

    async def _stream(job: Job, parsed: ParsedRequest, rid: str, kind: str):
        obj = "text_completion" if kind == "completion" else "chat.completion.chunk"
        first = True
        want_lp = parsed.params.logprobs is not None
        offset = 0
        try:
            while True:
                upd: Update = await job.queue.get()
                if upd.error:
                    yield f"data: {json.dumps({'error': {'message': upd.error, 'type': 'server_error'}})}\n\n"
                    break
                if upd.text or upd.finished or first or upd.logprobs:
                    if kind == "completion":
                        lp = _completion_logprobs(upd.logprobs, offset) if want_lp else None
                        offset += sum(len(_tok(t)) for t, _, _ in upd.logprobs)
                        choice = {
                            "index": 0,
                            "text": upd.text,
                            "logprobs": lp,
                            "finish_reason": upd.finish_reason if upd.finished else None,
                        }
                    else:
                        delta = {"role": "assistant", "content": upd.text} if first else {"content": upd.text}
                        choice = {
                            "index": 0,
                            "delta": delta,
                            "logprobs": _chat_logprobs(upd.logprobs) if want_lp else None,
                            "finish_reason": upd.finish_reason if upd.finished else None,
                        }
                    first = False
                    chunk = {
                        "id": rid,
                        "object": obj,
                        "created": int(time.time()),
                        "model": model_name,
                        "choices": [choice],
                    }
                    yield f"data: {json.dumps(chunk)}\n\n"
                if upd.finished:
                    if parsed.include_usage:
                        chunk = {
                            "id": rid,
                            "object": obj,
                            "created": int(time.time()),
                            "model": model_name,
                            "choices": [],
                            "usage": _usage(job, upd),
                        }
                        yield f"data: {json.dumps(chunk)}\n\n"
                    yield "data: [DONE]\n\n"
                    break
        finally:
            if not job.done:
                loop.cancel(job)  # client went away mid-stream: free its batch slot and caches now

    async def _serve(http: Request, kind: str):
        body = await _body(http)
        check_fields(body, kind)
        if kind == "completion":
            ids = completion_prompt(body, tokenizer)
            parsed = parse_common(body, ids, model_name, max_model_len, "max_tokens")
        else:
            ids = chat_prompt(body, tokenizer)
            parsed = parse_common(body, ids, model_name, max_model_len, "max_completion_tokens")
        job = _submit(parsed)
        rid = ("cmpl-" if kind == "completion" else "chatcmpl-") + job.request.id
        if parsed.stream:
            return StreamingResponse(_stream(job, parsed, rid, kind), media_type="text/event-stream")
        text, upd, lps = await _collect(job, http)
        if upd.error:
            raise RequestError(upd.error, status=500)
        want_lp = parsed.params.logprobs is not None
        if kind == "completion":
            lp = _completion_logprobs(lps, 0) if want_lp else None
            choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": upd.finish_reason}
            obj = "text_completion"
        else:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": _chat_logprobs(lps) if want_lp else None,
                "finish_reason": upd.finish_reason,
            }
            obj = "chat.completion"
        return {
            "id": rid,
            "object": obj,
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice],
            "usage": _usage(job, upd),
        }

    @app.post("/v1/completions")
    async def completions(http: Request):
        return await _serve(http, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request):
        return await _serve(http, "chat")

    return app
