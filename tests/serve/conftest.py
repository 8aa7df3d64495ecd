"""A live server on a loopback port (tiny target, random DFlash drafter), shared by the server suites."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.decoding.engine_helpers import save_random_draft

MODEL = "tiny"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server(tiny_target_dir, tmp_path_factory):

    from lilicorr.serve.server import build

    draft_dir = tmp_path_factory.mktemp("srv") / "draft"
    save_random_draft(tiny_target_dir, draft_dir)
    app, loop = build(
        str(tiny_target_dir),
        {"method": "dflash", "model": str(draft_dir), "num_speculative_tokens": 3},
        MODEL,
        max_num_seqs=8,
        max_model_len=256,
    )
    srv, th, url = serve_app(app)
    yield url, loop
    srv.should_exit = True
    th.join(timeout=10)


def serve_app(app):
    """Run an app on a free loopback port in a thread: (server, thread, base URL) once it is up."""
    import uvicorn

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    return srv, th, f"http://127.0.0.1:{port}"
