"""The machine description that `lilicorr env` prints and every benchmark result records."""

from __future__ import annotations

import json

import torch

from lilicorr.cli.main import main
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.machine import bf16_label, machine_info


def test_env_and_bench_results_describe_the_machine_alike(capsys) -> None:
    info = machine_info(with_time=True)
    assert main(["env"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == set(info) - {"time"}  # one description: the bench's only adds its timestamp
    assert {k: printed[k] for k in ("cpu", "cores", "bf16_flags", "fast_bf16")} == {
        k: info[k] for k in ("cpu", "cores", "bf16_flags", "fast_bf16")
    }


def test_fast_bf16_follows_the_cpu_flags_and_names_them() -> None:
    info = machine_info()
    native = bool({"amx_bf16", "avx512_bf16"} & set(info["bf16_flags"]))
    assert info["fast_bf16"] is native
    label = bf16_label()
    # the label names the instruction set --dtype auto relies on (no "AMX" on an AVX512-BF16 machine)
    assert label.endswith("AMX-bf16" if "amx_bf16" in info["bf16_flags"] else "AVX512-BF16" if native else "none")
    if not info["cuda"]:
        assert (str(resolve_dtype("auto")) == "torch.bfloat16") is native


def test_vector_isa_and_family_read_exact_cpuinfo_keys(monkeypatch) -> None:
    """Two "AMD EPYC" machines of this project differ several-fold in speed (Zen 1 AVX2, Zen 4 AVX512-BF16): the
    record must tell them apart, and "model" must not read the "model name" line."""
    from pathlib import Path

    from lilicorr.runtime import machine

    text = "cpu family\t: 25\nmodel name\t: AMD EPYC\nmodel\t\t: 17\nflags\t\t: fpu avx avx2 avx512f avx512_bf16\n"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text)
    info = machine.machine_info()
    assert (info["cpu"], info["cpu_family_model"], info["vector_isa"]) == ("AMD EPYC", "25/17", "avx512f")
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text.replace(" avx512f avx512_bf16", ""))
    assert machine.machine_info()["vector_isa"] == "avx2"


def test_the_record_says_which_dtypes_run_packed_linears(monkeypatch) -> None:
    """A figure taken with the packing off (``LILICORR_PACKED_LINEAR=0``, for A/B timing) must say so."""
    from lilicorr.runtime import packed_linear

    on = machine_info()["packed_linear"]
    assert on == [str(d).removeprefix("torch.") for d in packed_linear.DTYPES if packed_linear.kernels_agree(d)]
    monkeypatch.setenv(packed_linear.ENV, "0")
    assert machine_info()["packed_linear"] == []


def test_the_record_says_whether_a_4_bit_target_runs_the_int4_kernel(monkeypatch) -> None:
    from lilicorr.runtime import int4_linear

    monkeypatch.setenv(int4_linear.ROWS_ENV, "7")
    want = ["bfloat16<=7"] if int4_linear.kernel_agrees(torch.bfloat16) else []
    assert machine_info()["int4_target"] == want
    monkeypatch.setenv(int4_linear.ENV, "0")
    assert machine_info()["int4_target"] == []


def test_the_record_says_which_passes_run_on_one_thread(monkeypatch) -> None:
    from lilicorr.runtime import threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
        monkeypatch.setenv("GOMP_SPINCOUNT", "0")
        assert machine_info()["one_thread_passes"] == f"<={threads.SMALL_BATCH} rows, <={threads.SMALL_TOKENS} tokens"
        monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
        assert machine_info()["one_thread_passes"] is None
    finally:
        torch.set_num_threads(before)
