"""Raw-text training data for a base model (no chat template, ``<bos>`` first): ``data regenerate`` continues
each prompt row's text, or corpus windows of the chosen categories, and says so in its data card."""

import json
import shutil

import pytest

from lilicorr.data.chat import ChatError, text_ids
from lilicorr.data.prompt_sets import HUMANEVAL_INSTRUCTION
from lilicorr.datagen.raw_text import raw_text, write_raw_prompts
from lilicorr.datagen.regenerate import RegenConfig, load_regenerated, regenerate

BOS = "<|im_start|>"  # the tiny tokenizer has no <bos>: this special token plays Gemma's


@pytest.fixture(scope="module")
def base_target_dir(tiny_target_dir, tmp_path_factory):
    """The tiny target as a base model: no chat template, a ``<bos>`` its tokenizer adds (as Gemma's)."""
    out = tmp_path_factory.mktemp("base") / "t"
    shutil.copytree(tiny_target_dir, out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc.pop("chat_template", None)
    tc["bos_token"] = BOS
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    tj = json.loads((out / "tokenizer.json").read_text())
    bos_id = next(t["id"] for t in tj["added_tokens"] if t["content"] == BOS)
    tj["post_processor"] = {  # what Gemma's tokenizer.json holds: <bos> before every text
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}},
    }  # fmt: skip
    (out / "tokenizer.json").write_text(json.dumps(tj))
    return out


def _tok(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


ROWS = [
    {"id": "a", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "def add(x, y):"}]},
    {"id": "b", "prompt": "The quick brown fox"},
    {"id": "c", "messages": [{"role": "user", "content": f"{HUMANEVAL_INSTRUCTION}```python\ndef inc(x):\n```"}]},
    {"id": "d", "messages": [{"role": "user", "content": "import os\n"}, {"role": "assistant", "content": "ok"},
                             {"role": "user", "content": "later turn"}]},
]  # fmt: skip


def test_raw_text_of_prompt_rows():
    assert [raw_text(r) for r in ROWS] == ["def add(x, y):", "The quick brown fox", "def inc(x):\n", "import os\n"]
    with pytest.raises(ChatError, match="no user turn"):
        raw_text({"messages": [{"role": "system", "content": "x"}]})


def _prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_base_target_continues_raw_text_after_bos(base_target_dir, tmp_path):
    out = tmp_path / "raw.safetensors"
    cfg = RegenConfig(target=str(base_target_dir), out=str(out), num_sequences=8, new_tokens=8, shard_size=2,
                      concurrency=2, prompts=str(_prompts(tmp_path)), max_prompt_tokens=32,
                      engine="native")  # fmt: skip
    meta = regenerate(cfg)  # text_format auto: the target has no chat template
    assert meta["config"]["text_format"] == "raw"
    data = load_regenerated(out)
    tok = _tok(base_target_dir)
    bos = tok.convert_tokens_to_ids(BOS)
    assert data["tokens"].shape == (4, 32 + 8)
    for i, row in enumerate(ROWS):
        ids = text_ids(tok, raw_text(row))
        assert ids[0] == bos and ids[1:] == tok.encode(raw_text(row), add_special_tokens=False)
        assert data["tokens"][i, : len(ids)].tolist() == ids
        assert not data["loss_mask"][i, : len(ids)].any() and data["loss_mask"][i, len(ids)]
    card = (tmp_path / "raw.DATA_CARD.md").read_text()
    assert "| prompt format | raw text: each row's prompt" in card and "--text-format raw" in card
    layout = json.loads((tmp_path / "raw.safetensors.shards" / "manifest.json").read_text())["layout"]
    assert layout["text_format"] == "raw"
    # asking a base model for chat rows is refused by name, not templated
    chat = RegenConfig(**{**vars(cfg), "out": str(tmp_path / "chat.safetensors"), "text_format": "chat"})
    with pytest.raises(ChatError, match="no chat template"):
        regenerate(chat)


def test_raw_format_on_a_chat_target_skips_its_template(tiny_target_dir, tmp_path):
    out = tmp_path / "r.safetensors"
    cfg = RegenConfig(target=str(tiny_target_dir), out=str(out), num_sequences=2, new_tokens=4, engine="native",
                      prompts=str(_prompts(tmp_path)), max_prompt_tokens=32, text_format="raw")  # fmt: skip
    regenerate(cfg)
    tok = _tok(tiny_target_dir)
    ids = tok.encode("def add(x, y):", add_special_tokens=False)  # no <bos>: this tokenizer adds none
    assert load_regenerated(out)["tokens"][0, : len(ids)].tolist() == ids
    assert "| prompt format | raw text" in (tmp_path / "r.DATA_CARD.md").read_text()


def test_corpus_windows_of_one_category_start_with_bos(base_target_dir, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = [{"id": f"c{i}", "category": "code", "text": f"def f{i}(x):\n    return x * {i}\n" * 20} for i in range(3)]
    docs.append({"id": "p0", "category": "prose", "text": "Some prose about nothing at all. " * 40})
    (corpus / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "w.safetensors"
    cfg = RegenConfig(target=str(base_target_dir), out=str(out), corpus=str(corpus), num_sequences=4,
                      prompt_tokens=12, new_tokens=4, engine="native", categories="code")  # fmt: skip
    regenerate(cfg)
    data = load_regenerated(out)
    tok = _tok(base_target_dir)
    assert data["tokens"].shape == (4, 16)
    assert (data["tokens"][:, 0] == tok.convert_tokens_to_ids(BOS)).all()  # <bos>, then 11 document tokens
    assert data["loss_mask"][:, 12:].all() and not data["loss_mask"][:, :12].any()
    assert all("def f" in tok.decode(t[1:12]) or "return x" in tok.decode(t[1:12]) for t in data["tokens"])
    assert "corpus windows of code documents" in (tmp_path / "w.DATA_CARD.md").read_text()
    bad = RegenConfig(**{**vars(cfg), "out": str(tmp_path / "x.safetensors"), "categories": "poetry"})
    with pytest.raises(ValueError, match="poetry"):
        regenerate(bad)


def test_write_raw_prompts(tmp_path):
    n = write_raw_prompts(str(_prompts(tmp_path)), str(tmp_path / "raw.jsonl"))
    rows = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    assert n == 4 and [r["prompt"] for r in rows] == [raw_text(r) for r in ROWS]
    assert [r["id"] for r in rows] == ["a", "b", "c", "d"]
