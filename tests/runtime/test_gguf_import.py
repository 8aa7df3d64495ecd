"""GGUF import on a small GGUF written here (llama layout, Q8_0 and F32 tensors, BPE tokenizer)."""

import json

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

V, H, L, NH, NKV, FF = 64, 32, 2, 4, 2, 64
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_gguf(path, add_bos: bool = False):
    rng = np.random.default_rng(0)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Ġ", "Ċ"]
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    tokens += ["ab", "Ġa"]
    tokens += [f"x{i}" for i in range(V - len(tokens))]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (V - 3))
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(TEMPLATE)
    if add_bos:
        w.add_add_bos_token(True)

    def t(name, shape, quant=False):
        a = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        if quant:
            w.add_tensor(
                name, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor(name, a)

    t("token_embd.weight", (V, H))
    t("output_norm.weight", (H,))
    kv = NKV * H // NH
    for i in range(L):
        t(f"blk.{i}.attn_norm.weight", (H,))
        t(f"blk.{i}.ffn_norm.weight", (H,))
        for name, shape in (("attn_q", (H, H)), ("attn_k", (kv, H)), ("attn_v", (kv, H)), ("attn_output", (H, H))):
            t(f"blk.{i}.{name}.weight", shape, quant=True)
        for name, shape in (("ffn_gate", (FF, H)), ("ffn_up", (FF, H)), ("ffn_down", (H, FF))):
            t(f"blk.{i}.{name}.weight", shape, quant=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf")


def test_import_matches_transformers_own_gguf_load(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM

    from lilicorr.runtime.gguf_import import import_gguf
    from lilicorr.runtime.runtime import TargetRuntime

    meta = import_gguf(tiny_gguf, tmp_path / "out")
    assert meta["architecture"] == "LlamaForCausalLM" and len(meta["source_sha256"]) == 64
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["num_hidden_layers"] == L
    direct = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name).eval()
    target = TargetRuntime.load(tmp_path / "out")  # the project's own loader on the imported folder
    x = torch.randint(3, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(target.model(input_ids=x).logits, direct(input_ids=x).logits, rtol=0, atol=1e-6)
    tok = target.tokenizer
    assert tok.decode(tok.encode("ab a", add_special_tokens=False)) == "ab a"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_bad_input_names_the_file_and_writes_nothing(tmp_path):
    from lilicorr.runtime.folder import TargetError
    from lilicorr.runtime.gguf_import import import_gguf

    with pytest.raises(TargetError, match="not found"):
        import_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(TargetError, match="not a GGUF file"):
        import_gguf(bogus, tmp_path / "out")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 10)
    with pytest.raises(TargetError, match="could not read"):
        import_gguf(truncated, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_imported_card_records_source_speed_and_answers(tiny_gguf, tmp_path):
    from lilicorr.cards.imported import SAMPLE_QUESTIONS, write_imported_card
    from lilicorr.runtime.gguf_import import import_gguf

    meta = import_gguf(tiny_gguf, tmp_path / "out")
    text = write_imported_card(tmp_path / "out", wheel="pkg==1.0", max_tokens=4).read_text()
    assert meta["source_sha256"] in text and "pkg==1.0" in text and "dequantized to float32" in text
    assert "| float32 |" in text and "| bfloat16 |" in text
    assert all(q in text for q in SAMPLE_QUESTIONS)


def test_base_model_import_has_no_template_and_keeps_the_ggufs_bos(tmp_path):
    """A base model (``chat=False``) is saved without the GGUF's chat template, and raw text gets the ``<bos>``
    the GGUF asks for (``tokenizer.ggml.add_bos_token``, which transformers' GGUF tokenizer drops)."""
    from transformers import AutoTokenizer

    from lilicorr.data.chat import ChatError, row_ids
    from lilicorr.runtime.gguf_import import import_gguf

    path = write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True)
    assert not AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name).add_bos_token  # the loader drops it
    meta = import_gguf(path, tmp_path / "base", chat=False)
    assert meta["add_bos_token"] and not meta["chat_template"]
    tok = AutoTokenizer.from_pretrained(tmp_path / "base")  # as every tool reloads it
    assert row_ids(tok, {"prompt": "ab a"}) == [1, *tok.encode("ab a", add_special_tokens=False)]
    with pytest.raises(ChatError, match="has no chat template"):
        row_ids(tok, {"prompt": "ab a"}, chat=True)
    chat = import_gguf(path, tmp_path / "chat")  # the default keeps the template
    assert chat["chat_template"] and AutoTokenizer.from_pretrained(tmp_path / "chat").chat_template


def test_base_card_says_base_model_and_shows_raw_continuations(tmp_path):
    from lilicorr.cli.target_card import SAMPLE_TEXTS, write_base_card
    from lilicorr.runtime.gguf_import import import_gguf
    from lilicorr.runtime.targets import TARGETS

    import_gguf(write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True), tmp_path / "base", chat=False)
    text = write_base_card(tmp_path / "base", TARGETS["gemma3-270m"], max_tokens=3).read_text()
    assert "**A base model**: `google/gemma-3-270m`" in text and "refused by name" in text
    assert "| float32 |" in text and "| bfloat16 |" in text and all(t in text for t in SAMPLE_TEXTS)
