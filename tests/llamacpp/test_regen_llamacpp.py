"""``data regenerate --engine llamacpp``: llama-server's parallel slots answer like the native engine."""

from tests.regen_engines import check_against_native


def test_llamacpp_engine_answers_like_native(tmp_path):
    share = check_against_native("llamacpp", tmp_path)
    print(f"llamacpp vs native fp32, T=0: {share:.3f} of answer tokens before the first difference")
    assert share >= 0.5  # Q4_1 kernels vs dequantized fp32 weights: late divergences only
