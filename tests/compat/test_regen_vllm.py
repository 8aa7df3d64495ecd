"""``data regenerate --engine vllm``: vLLM's offline engine answers like the native engine."""

from tests.regen_engines import check_against_native


def test_vllm_engine_answers_like_native(tmp_path):
    share = check_against_native("vllm", tmp_path)
    print(f"vLLM vs native fp32, T=0: {share:.3f} of answer tokens before the first difference")
    assert share >= 0.5
