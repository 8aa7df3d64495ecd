import json

import pytest

from lilicorr.data import corpus
from lilicorr.data.corpus import CorpusError, build_corpus, read_split, split_of


def test_split_is_stable_and_roughly_90_5_5():
    ids = [f"code/stdlib/mod{i}.py" for i in range(4000)]
    splits = [split_of(i) for i in ids]
    assert splits == [split_of(i) for i in ids]
    assert 0.87 < splits.count("train") / 4000 < 0.93
    assert split_of("code/stdlib/os.py") == split_of("code/stdlib/os.py")


def _fake_sources(tmp_path):
    std = tmp_path / "stdlib"
    (std / "json").mkdir(parents=True)
    (std / "test").mkdir()
    (std / "json" / "__init__.py").write_text("import x\n")
    (std / "test" / "test_json.py").write_text("assert 1\n")
    (std / "json" / "test_helper.py").write_text("assert 2\n")
    for i in range(30):
        (std / f"mod{i}.py").write_text(f"X = {i}\n")
    ext = tmp_path / "out" / "extract"
    (ext / "usr/share/doc/python3.11/html/_sources/library").mkdir(parents=True)
    (ext / "usr/share/doc/python3.11/html/_sources/library/json.rst.txt").write_text("JSON\n====\n")
    (ext / "usr/share/perl/5.36.0/pod").mkdir(parents=True)
    (ext / "usr/share/perl/5.36.0/pod/perlfaq.pod").write_text("=head1 NAME\n")
    return std


def test_build_corpus_deterministic_without_tests(tmp_path, monkeypatch):
    std = _fake_sources(tmp_path)
    monkeypatch.setattr(corpus, "fetch_debs", lambda out: {"python3.11-doc": "1", "perl-doc": "2"})
    m1 = build_corpus(tmp_path / "out", stdlib=std)
    m2 = build_corpus(tmp_path / "out", stdlib=std)
    assert m1 == m2
    all_docs = [d for s in corpus.SPLITS for d in read_split(tmp_path / "out", s)]
    ids = {d.id for d in all_docs}
    assert "code/stdlib/json/__init__.py" in ids
    assert not any("test" in i.split("/")[-1] for i in ids)
    assert {d.category for d in all_docs} == {"code", "prose"}
    assert sum(m1["splits"][s]["files"] for s in corpus.SPLITS) == len(all_docs) == 33
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["hash"] == m1["hash"]


def test_read_split_errors_name_the_problem(tmp_path):
    with pytest.raises(CorpusError, match="validation.jsonl not found"):
        read_split(tmp_path, "validation")
    with pytest.raises(CorpusError, match="unknown split 'dev'"):
        read_split(tmp_path, "dev")
