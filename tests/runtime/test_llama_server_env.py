"""llama-server runs with llama.cpp's own OpenMP defaults, not the PASSIVE wait our commands export for torch
(runtime/llama_server.py: under PASSIVE every ggml graph node's barrier sleeps, 3x slower AR on 2 cores)."""

from __future__ import annotations

from lilicorr.runtime.llama_server import LlamaServer, llama_env


def test_llama_env_drops_the_openmp_settings_we_chose_for_torch(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    monkeypatch.setenv("KMP_BLOCKTIME", "0")
    monkeypatch.setenv("LILICORR_SOMETHING", "kept")
    env = llama_env()
    assert not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"} & env.keys()
    assert env["LILICORR_SOMETHING"] == "kept"
    assert llama_env({"OMP_WAIT_POLICY": "PASSIVE"})["OMP_WAIT_POLICY"] == "PASSIVE"  # asked for: reproduces


def test_llama_server_process_gets_that_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    binary, model = tmp_path / "llama-server", tmp_path / "m.gguf"
    binary.write_text("")
    model.write_text("")
    server = LlamaServer(model, binary=binary, env={"LLAMA_LILICORR_DUMP": "x.jsonl"})
    assert "OMP_WAIT_POLICY" not in server.env
    assert server.env["LLAMA_LILICORR_DUMP"] == "x.jsonl"
