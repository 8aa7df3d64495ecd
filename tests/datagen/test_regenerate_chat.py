import json

import pytest
import torch

from lilicorr.datagen.regenerate import RegenConfig, load_regenerated, regenerate


def test_chat_rows_are_templated_padded_and_masked(tiny_target_dir, tmp_path):
    from transformers import AutoTokenizer

    from lilicorr.data.chat import row_ids

    rows = [{"id": i, "messages": [{"role": "user", "content": f"def f{i}(x):" + " y" * i}]} for i in range(6)]
    rows.append({"id": "long", "messages": [{"role": "user", "content": "word " * 400}]})  # over the prompt budget
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "regen.safetensors"
    cfg = RegenConfig(
        target=str(tiny_target_dir),
        corpus="unused",
        out=str(out),
        num_sequences=8,
        new_tokens=12,
        shard_size=4,
        concurrency=3,
        engine="native",
        prompts=str(prompts),
        max_prompt_tokens=64,
    )
    meta = regenerate(cfg)
    data = load_regenerated(out)
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    assert meta["sequences"] == 6 and data["tokens"].shape == (6, 64 + 12)  # the long prompt is skipped
    assert data["sampled"].tolist() == [False, True] * 3
    for i in range(6):
        ids = row_ids(tok, rows[i])
        toks, mask = data["tokens"][i], data["loss_mask"][i]
        assert toks[: len(ids)].tolist() == ids  # the chat template, left-aligned
        assert not mask[: len(ids)].any() and mask[len(ids)]  # the answer only is supervised
        n = int(mask.sum())
        assert 1 <= n <= 12 and mask[len(ids) : len(ids) + n].all()
    assert meta["answer_tokens"] == int(data["loss_mask"].sum())
    # resumable: a rerun reuses the shards and writes the same file
    before = out.read_bytes()
    regenerate(cfg)
    assert out.read_bytes() == before and torch.equal(load_regenerated(out)["tokens"], data["tokens"])


def _chat_prompts(tmp_path, n: int, answers: bool = False):
    rows = []
    for i in range(n):
        row = {"id": i, "messages": [{"role": "user", "content": f"def f{i}(x):" + " y" * i}]}
        if answers:
            row["answer"] = f"return x + {i}" + " z" * i
        rows.append(row)
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows, path


def test_interrupted_run_resumes_from_its_shards_and_manifest(tiny_target_dir, tmp_path):
    """A cut run leaves whole shards only; the rerun answers the missing ones alone and writes the same data."""
    _, prompts = _chat_prompts(tmp_path, 10)
    out = tmp_path / "regen.safetensors"
    cfg = RegenConfig(target=str(tiny_target_dir), out=str(out), num_sequences=10, new_tokens=10,
                      shard_size=4, concurrency=4, prompts=str(prompts), max_prompt_tokens=64,
                      engine="native")  # fmt: skip
    regenerate(cfg)
    full = load_regenerated(out)
    shards = tmp_path / "regen.safetensors.shards"
    manifest = json.loads((shards / "manifest.json").read_text())
    assert sorted(manifest["shards"]) == ["00000", "00001", "00002"]
    assert [manifest["shards"][k]["rows"] for k in sorted(manifest["shards"])] == [4, 4, 2]
    assert sum(v["answer_tokens"] for v in manifest["shards"].values()) == int(full["loss_mask"].sum())
    assert all(v["engine"] == "native" for v in manifest["shards"].values())
    assert sum(v["sampled_rows"] for v in manifest["shards"].values()) == int(full["sampled"].sum())
    card = (tmp_path / "regen.DATA_CARD.md").read_text()
    assert "| status | complete" in card and "| answer tokens | " + str(int(full["loss_mask"].sum())) in card
    # a run cut after its first shard has a card that says how far it got
    from lilicorr.datagen.data_card import data_card

    partial = {**manifest, "shards": {"00000": manifest["shards"]["00000"]}}
    assert "**in progress**: 4 of 10 rows answered" in data_card(vars(cfg), partial, "cmd", 10)
    # the session was cut after shard 0: shards 1 and 2 are gone, shard 0 must not be recomputed
    (shards / "00001.safetensors").unlink()
    (shards / "00002.safetensors").unlink()
    stamp = (shards / "00000.safetensors").stat().st_mtime_ns
    regenerate(cfg)
    assert (shards / "00000.safetensors").stat().st_mtime_ns == stamp
    again = load_regenerated(out)
    for k in ("tokens", "loss_mask", "sampled"):
        assert torch.equal(again[k], full[k]), k  # seeded rows: the same answers, greedy and sampled
    # a run over other prompts into the same shard folder is refused, naming the folder
    cfg.new_tokens = 11
    with pytest.raises(ValueError, match="manifest.json"):
        regenerate(cfg)


def test_fixed_engine_stores_the_rows_own_answers(tiny_target_dir, tmp_path):
    from transformers import AutoTokenizer

    from lilicorr.data.chat import row_ids

    rows, prompts = _chat_prompts(tmp_path, 5, answers=True)
    out = tmp_path / "fixed.safetensors"
    cfg = RegenConfig(target=str(tiny_target_dir), out=str(out), num_sequences=5, new_tokens=6, shard_size=2,
                      prompts=str(prompts), max_prompt_tokens=64, engine="fixed")  # fmt: skip
    meta = regenerate(cfg)
    data = load_regenerated(out)
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    eos = tok.eos_token_id
    for i, row in enumerate(rows):
        ids = row_ids(tok, row)
        answer = (tok.encode(row["answer"], add_special_tokens=False) + [eos])[:6]
        n = len(ids) + len(answer)
        assert data["tokens"][i, len(ids) : n].tolist() == answer
        assert data["loss_mask"][i].nonzero().flatten().tolist() == list(range(len(ids), n))
    assert meta["engines"] == ["fixed"] and not data["sampled"].any()  # nothing was sampled
    assert "| sampling | none: the rows' own answers" in (tmp_path / "fixed.DATA_CARD.md").read_text()
    # rows without an answer (a conversation's last turn) are left out of fixed data, not an error
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(prompts.read_text() + json.dumps({"messages": [{"role": "user", "content": "no reply"}]}) + "\n")
    cfg_mixed = RegenConfig(target=str(tiny_target_dir), out=str(tmp_path / "m.safetensors"), num_sequences=9,
                            new_tokens=6, prompts=str(mixed), max_prompt_tokens=64, engine="fixed")  # fmt: skip
    assert regenerate(cfg_mixed)["sequences"] == 5
    # a prompts file without answers cannot feed the fixed engine: the error names the field
    _, bare = _chat_prompts(tmp_path / "bare", 2) if (tmp_path / "bare").mkdir() is None else (None, None)
    cfg = RegenConfig(target=str(tiny_target_dir), out=str(tmp_path / "f2.safetensors"), num_sequences=2,
                      new_tokens=6, prompts=str(bare), max_prompt_tokens=64, engine="fixed")  # fmt: skip
    with pytest.raises(ValueError, match="'answer'"):
        regenerate(cfg)
    assert not (tmp_path / "f2.safetensors").exists()


def test_skip_prompts_continues_the_set_after_an_earlier_run(tiny_target_dir, tmp_path):
    """``--skip-prompts N`` starts after the first N prompts that fit (a too-long prompt is not counted), so a
    second file holds exactly the rows after the first one's, in its own shards."""
    from transformers import AutoTokenizer

    from lilicorr.data.chat import row_ids

    rows, prompts = _chat_prompts(tmp_path, 7)
    rows.insert(1, {"id": "long", "messages": [{"role": "user", "content": "word " * 400}]})  # never fits
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = dict(target=str(tiny_target_dir), corpus="unused", new_tokens=4, shard_size=2, concurrency=2,
                  engine="native", prompts=str(prompts), max_prompt_tokens=64, sampled_fraction=0.0)  # fmt: skip
    first = RegenConfig(out=str(tmp_path / "first.safetensors"), num_sequences=3, **common)
    rest = RegenConfig(out=str(tmp_path / "rest.safetensors"), num_sequences=100, skip_prompts=3, **common)
    regenerate(first)
    meta = regenerate(rest)
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    fitting = [r for r in rows if r["id"] != "long"]
    got = load_regenerated(tmp_path / "rest.safetensors")["tokens"]
    assert meta["sequences"] == 4
    for i, row in enumerate(fitting[3:]):
        ids = row_ids(tok, row)
        assert got[i, : len(ids)].tolist() == ids
    layout = json.loads((tmp_path / "rest.safetensors.shards" / "manifest.json").read_text())["layout"]
    assert layout["skip_prompts"] == 3


def test_skip_prompts_without_prompts_or_below_zero_is_refused_by_name(tiny_target_dir, tmp_path):
    from lilicorr.datagen.regenerate import row_layout

    base = dict(target=str(tiny_target_dir), out=str(tmp_path / "x.safetensors"), engine="native")
    with pytest.raises(ValueError, match="--skip-prompts 3 counts --prompts rows: no --prompts given"):
        row_layout(RegenConfig(**base, skip_prompts=3))
    _, prompts = _chat_prompts(tmp_path, 2)
    with pytest.raises(ValueError, match="--skip-prompts -1: expected a count ≥ 0"):
        row_layout(RegenConfig(**base, prompts=str(prompts), skip_prompts=-1))
    assert not (tmp_path / "x.safetensors.shards").exists()  # nothing written
