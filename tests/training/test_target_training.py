import json

import pytest
import torch

from lilicorr.data import corpus as corpus_mod
from lilicorr.training import target as target_mod
from lilicorr.training.target import TargetTrainConfig, lr_at, train_target


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    from lilicorr.data.tokenizer import save_tokenizer, train_tokenizer
    from tests.conftest import source_texts

    root = tmp_path_factory.mktemp("corpus")
    std = root / "stdlib"
    std.mkdir()
    chunks = [c for t in source_texts() for c in t.split("\n\n\n") if len(c) > 200]
    for i, text in enumerate(chunks):
        (std / f"m{i}.py").write_text(text)
    ext = root / "out" / "extract"
    pod = ext / "usr/share/perl/5.36.0/pod"
    pod.mkdir(parents=True)
    (ext / "usr/share/doc/python3.11/html/_sources").mkdir(parents=True)
    for i, text in enumerate(chunks):
        (pod / f"p{i}.pod").write_text("=head1 NAME\n\n" + text.replace("def ", "sub "))
    mp = pytest.MonkeyPatch()
    mp.setattr(corpus_mod, "fetch_debs", lambda out: {"python3.11-doc": "x", "perl-doc": "y"})
    corpus_mod.build_corpus(root / "out", stdlib=std)
    mp.undo()
    tok_dir = root / "tok"
    save_tokenizer(train_tokenizer(source_texts(), 4096), tok_dir, 2048)
    return root / "out", tok_dir


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(
        target_mod.PRESETS,
        "test",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        ),
    )


def _cfg(small_corpus, tmp_path, name, steps):
    corpus, tok = small_corpus
    return TargetTrainConfig(
        preset="test",
        corpus=str(corpus),
        tokenizer=str(tok),
        out=str(tmp_path / name),
        run_dir=str(tmp_path / f"run-{name}"),
        steps=steps,
        batch_size=4,
        seq_len=32,
        warmup=2,
        val_every=3,
        val_windows=4,
        checkpoint_minutes=0.0,
        threads=1,
        max_position_embeddings=256,
    )


def test_lr_schedule_warmup_then_cosine():
    cfg = TargetTrainConfig(preset="x", corpus="", tokenizer="", out="", run_dir="", steps=100, warmup=10, lr=1.0)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(100, cfg) == pytest.approx(0.1)
    assert lr_at(55, cfg) == pytest.approx(0.55)


def test_train_exports_hf_folder_and_resume_is_exact(small_corpus, tmp_path, tiny_preset):
    from transformers import AutoModelForCausalLM

    straight = train_target(_cfg(small_corpus, tmp_path, "a", 6))
    # Interrupted run: 3 steps, then resumed to 6 with the same config.
    train_target(_cfg(small_corpus, tmp_path, "b", 3))
    cfg_b = _cfg(small_corpus, tmp_path, "b", 6)
    resumed = train_target(cfg_b, resume=True)
    assert straight["tokens_seen"] == resumed["tokens_seen"] == 6 * 4 * 32
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "b")
    assert a.dtype == torch.bfloat16
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=n)
    summary = json.loads((tmp_path / "a" / "training_summary.json").read_text())
    assert set(summary["final_val"]) == {"code", "prose"}
    assert (tmp_path / "a" / "tokenizer.json").exists()


def test_model_card_written_from_measurements(small_corpus, tmp_path, tiny_preset):
    from lilicorr.cards.target import distinct_ngram_ratio, write_target_card

    train_target(_cfg(small_corpus, tmp_path, "c", 3))
    ev = write_target_card(tmp_path / "c", small_corpus[0], command="lilicorr train target …", threads=1)
    card = (tmp_path / "c" / "MODEL_CARD.md").read_text()
    assert "lilicorr train target …" in card and f"{ev['distinct4_greedy_128']:.3f}" in card
    assert set(ev["metrics"]) == {"validation/code", "validation/prose", "test/code", "test/prose"}
    assert distinct_ngram_ratio([[1, 2, 3, 4, 1, 2, 3, 4]]) == pytest.approx(4 / 5)
    assert distinct_ngram_ratio([[1, 2, 3, 4, 5]]) == 1.0
