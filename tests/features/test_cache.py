import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from lilicorr.features.cache import FeatureStore, extract_features, supervised_length
from lilicorr.training.draft import train_draft
from lilicorr.training.draft_config import mask_token_id
from tests.training.test_draft_training import _cfg as base_cfg


def _cfg(target, data, out, mode, **kw):
    """The draft-training suite's tiny config: 6 steps, validation every 2, fp32, taps [0, 2]."""
    return replace(base_cfg(target, data, out, mode, steps=6), val_every=2, target_layer_ids=[0, 2], bf16=False, **kw)


def _log(run):
    return [json.loads(x) for x in (run / "train.log").read_text().splitlines()]


def test_supervised_length_is_last_masked_column_plus_one():
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[0, 2:5] = True
    mask[2, 6:8] = True
    assert supervised_length(mask) == 8
    assert supervised_length(torch.zeros(2, 4, dtype=torch.bool)) == 0


@pytest.mark.parametrize("mode", ["dflash", "lilicorr"])
def test_cached_features_train_exactly_like_the_online_target(tiny_target_dir, regen_data, tmp_path, mode):
    """fp32 cache + fp32 training: same losses and validation as running the target every step."""
    cache = tmp_path / "feats"
    # fp32 compute pinned: "auto" runs the target in bf16 on a CPU with native bf16, and this compares with fp32
    meta = extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16, dtype="float32",
                            compute_dtype="float32")  # fmt: skip
    assert meta["sequences"] == 40 and meta["length"] == 32
    assert meta["timed_shards"] == 3 and meta["positions_per_s"] > 0  # 40 rows in shards of 16
    assert meta["disk_bytes"] == sum(f.stat().st_size for f in cache.glob("*.safetensors"))
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "online", mode))
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "cached", mode, features=str(cache)))
    online, cached = _log(tmp_path / "online-run"), _log(tmp_path / "cached-run")
    lo = [r["loss"] for r in online if "loss" in r]
    lc = [r["loss"] for r in cached if "loss" in r]
    assert len(lo) == len(lc) == 3  # logged at each validation
    assert lc == pytest.approx(lo, rel=1e-4, abs=1e-5)
    vo = [r["val"] for r in online if "val" in r]
    vc = [r["val"] for r in cached if "val" in r]
    key = "dflash_loss" if mode == "dflash" else "head_loss"
    assert [v[key] for v in vc] == pytest.approx([v[key] for v in vo], rel=1e-4)


def test_extraction_resumes_and_rejects_foreign_data(tiny_target_dir, regen_data, tmp_path):
    cache = tmp_path / "feats"
    extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16)
    first = load_file(str(cache / "00001.safetensors"))
    (cache / "00001.safetensors").unlink()
    with pytest.raises(ValueError, match=r"shards \[1\] missing"):
        FeatureStore(cache)
    extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16)  # resumes
    assert torch.equal(load_file(str(cache / "00001.safetensors"))["taps"], first["taps"])
    store = FeatureStore(cache)
    taps, final = store.get(torch.tensor([0, 17, 39]))
    assert taps.shape == (3, 32, 2 * 64) and final.shape == (3, 32, 64) and taps.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="layer_ids"):
        FeatureStore(cache, layer_ids=[0, 1])
    other = load_file(str(regen_data))
    other["tokens"] = other["tokens"].flip(0).contiguous()
    with pytest.raises(ValueError, match="other data"):
        FeatureStore(cache, other["tokens"])
    save_file(other, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="written for other data"):
        extract_features(str(tiny_target_dir), str(tmp_path / "other.safetensors"), str(cache), [0, 2], shard_size=16)


def test_extraction_of_a_prefix_serves_its_rows_and_extends(tiny_target_dir, regen_data, tmp_path):
    """`data features --max-sequences N` makes only the shards a trainer's `--max-sequences N` reads; a later
    call without it completes the same cache."""
    cache = tmp_path / "feats"
    extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16, max_sequences=20)
    assert sorted(p.name for p in cache.glob("*.safetensors")) == ["00000.safetensors", "00001.safetensors"]
    FeatureStore(cache, sequences=20).get(torch.tensor([0, 19]))
    with pytest.raises(ValueError, match=r"shards \[2"):
        FeatureStore(cache)
    extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16)
    FeatureStore(cache).get(torch.tensor([39]))


def test_packed_rows_equal_the_target_features_up_to_each_rows_length(tiny_target_dir, regen_data, tmp_path):
    """The packed layout stores each row only up to its last supervised column: reads give exactly the target's
    features there and zeros after, and the cache is smaller than rows × the data's longest length."""
    from lilicorr.features.cache import row_lengths, target_features
    from lilicorr.runtime.runtime import TargetRuntime

    data = load_file(str(regen_data))
    mask = data["loss_mask"].bool()
    mask[1, 20:] = False  # a short row
    data["loss_mask"] = mask
    save_file(data, str(tmp_path / "short.safetensors"))
    cache = tmp_path / "feats"
    meta = extract_features(str(tiny_target_dir), str(tmp_path / "short.safetensors"), str(cache), [0, 2],
                            shard_size=8, dtype="float32", compute_dtype="float32")  # fmt: skip
    assert meta["layout"] == "packed"
    lens = row_lengths(mask)
    store = FeatureStore(cache, data["tokens"], [0, 2])
    idx = torch.tensor([0, 1, 9])
    taps, final = store.get(idx)
    target = TargetRuntime.load(tiny_target_dir)
    want_t, want_f = target_features(target.model, data["tokens"][idx, : store.length].long(), [0, 2])
    for r, i in enumerate(idx.tolist()):
        n = int(lens[i])
        torch.testing.assert_close(taps[r, :n], want_t[r, :n], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(final[r, :n], want_f[r, :n], rtol=1e-5, atol=1e-5)
        assert not taps[r, n:].any() and not final[r, n:].any()
    assert int(lens[1]) == 20 and store.get(idx, 10)[0].shape[1] == 10
    assert meta["disk_bytes"] < len(mask) * store.length * (2 + 1) * 64 * 4


def test_a_cache_from_before_packing_stays_padded(tiny_target_dir, regen_data, tmp_path):
    """A cache begun in the padded layout (meta without ``layout``) resumes padded and reads as before."""
    import json

    packed = tmp_path / "packed"
    meta = extract_features(str(tiny_target_dir), str(regen_data), str(packed), [0, 2], shard_size=16)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    old = {k: v for k, v in json.loads((packed / "meta.json").read_text()).items() if k != "layout"}
    (legacy / "meta.json").write_text(json.dumps(old))
    extract_features(str(tiny_target_dir), str(regen_data), str(legacy), [0, 2], shard_size=16)
    assert "offsets" not in load_file(str(legacy / "00000.safetensors"))
    assert load_file(str(legacy / "00000.safetensors"))["taps"].shape[:2] == (16, meta["length"])
    idx = torch.tensor([3, 20])
    a, b = FeatureStore(legacy).get(idx), FeatureStore(packed).get(idx)
    from lilicorr.features.cache import row_lengths

    lens = row_lengths(load_file(str(regen_data))["loss_mask"].bool())[idx]
    for r in range(2):
        assert torch.equal(a[0][r, : lens[r]], b[0][r, : lens[r]])


class _Tok:
    def __init__(self, vocab):
        self.vocab = vocab

    def get_vocab(self):
        return self.vocab


def test_mask_token_falls_back_to_a_rare_special_token():
    assert mask_token_id(_Tok({"<|mask|>": 3, "<empty_output>": 16})) == 3
    assert mask_token_id(_Tok({"<empty_output>": 16, "a": 17})) == 16  # SmolLM2
    assert mask_token_id(_Tok({"<x>": 5}), "<x>") == 5
    with pytest.raises(ValueError, match="--mask-token"):
        mask_token_id(_Tok({"a": 1}))


def test_lilicorr_with_dflash2_convolution_trains_and_reloads(tiny_target_dir, regen_data, tmp_path):
    from lilicorr.checkpoint import load_draft

    cfg = _cfg(tiny_target_dir, regen_data, tmp_path / "conv", "lilicorr", conv_kernel_size=2, conv_group_size=16)
    train_draft(cfg)
    model = load_draft(tmp_path / "conv")
    assert model.cfg.conv_kernel_size == 2 and model.cfg.conv_group_size == 16 and model.is_lilicorr
    assert any("conv" in k for k in model.state_dict())


def test_an_extraction_that_would_fill_the_disk_is_refused_before_it_starts(
    tiny_target_dir, regen_data, tmp_path, monkeypatch, capsys
):
    """The missing shards' bytes are checked against the free disk first: refused with the sizes and the
    --max-sequences that fits, nothing written; shards already made are not counted again."""
    import collections
    import shutil

    from lilicorr.features import cache as features

    cache = tmp_path / "feats"
    extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16, max_sequences=16)
    one_shard = (cache / "00000.safetensors").stat().st_size
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, one_shard))  # room for about one shard
    with pytest.raises(OSError, match=r"GiB more for \d+ rows.*--max-sequences 16 fits"):
        extract_features(str(tiny_target_dir), str(regen_data), str(cache), [0, 2], shard_size=16)
    assert [p.name for p in cache.glob("*.safetensors")] == ["00000.safetensors"]  # nothing new, nothing lost
    from lilicorr.cli.main import main

    fresh = tmp_path / "cli"
    cli = ["data", "features", "--target", str(tiny_target_dir), "--data", str(regen_data), "--out", str(fresh)]
    assert main([*cli, "--target-layer-ids", "0,2"]) == 2  # the command line: the message, no traceback
    assert "GiB free" in capsys.readouterr().err and not list(fresh.glob("*.safetensors"))
    data = load_file(str(regen_data))
    tokens, mask = data["tokens"], data["loss_mask"].bool()
    width = 3 * 64 * 2  # two taps + final, H 64, bf16
    rest = features.check_disk(cache, tokens, mask, 16, len(tokens), True, width, free=10**12)
    everything = features.check_disk(tmp_path, tokens, mask, 16, len(tokens), True, width, free=10**12)
    assert 0 < rest < everything and everything - rest == int(features.row_lengths(mask[:16]).sum()) * width


def test_fp8_cache_holds_the_bf16_features_within_fp8_precision_at_half_the_bytes(
    tiny_target_dir, regen_data, tmp_path
):
    """--dtype float8_e4m3fn: one byte a value and per-channel scales; read back as bf16 within fp8's relative
    precision of the bf16 cache (channel by channel, also for a channel far larger than the rest), and trainable."""
    from lilicorr.features.cache import dequantize_fp8, quantize_fp8

    bf16, fp8 = tmp_path / "bf16", tmp_path / "fp8"
    extract_features(str(tiny_target_dir), str(regen_data), str(bf16), [0, 2], shard_size=16)
    meta = extract_features(
        str(tiny_target_dir), str(regen_data), str(fp8), [0, 2], shard_size=16, dtype="float8_e4m3fn"
    )
    assert 0.45 < meta["disk_bytes"] / extract_features(str(tiny_target_dir), str(regen_data), str(bf16), [0, 2],
                                                        shard_size=16)["disk_bytes"] < 0.6  # fmt: skip
    idx = torch.tensor([0, 5, 17, 39])
    (tb, fb), (tq, fq) = FeatureStore(bf16).get(idx), FeatureStore(fp8).get(idx)
    assert tq.dtype == fq.dtype == torch.bfloat16 and tq.shape == tb.shape and fq.shape == fb.shape
    for want, got in ((tb.float(), tq.float()), (fb.float(), fq.float())):
        err = (got - want).abs()
        assert float(err.max()) <= 0.07 * float(want.abs().max()) and float(err.mean()) <= 0.04 * float(
            want.abs().mean()
        )
    x = torch.randn(64, 8)
    x[:, 3] *= 1000  # a massive channel keeps the others' precision
    back = dequantize_fp8(*quantize_fp8(x)).float()
    assert ((back - x).abs() <= 0.07 * x.abs() + 1e-3).all()
    train_draft(replace(_cfg(tiny_target_dir, regen_data, tmp_path / "run", "dflash", features=str(fp8)), bf16=True))
    assert [r["step"] for r in _log(tmp_path / "run-run") if "val" in r][-1] == 6


def test_a_merge_reuses_the_shards_another_cache_holds_for_its_first_rows(tiny_target_dir, regen_data, tmp_path):
    """`data features --reuse OTHER`: a file that starts with another cache's rows (a merge's first part, here right-
    padded wider, as `data merge` pads to its longest part) links those full shards instead of running the target
    on them, computes the rest, and reads back what an extraction without reuse gives; the rate counts only the
    shards it computed. A donor stored otherwise is refused by name."""
    import os

    from lilicorr.features.cache import extraction_report

    donor = tmp_path / "donor"
    extract_features(str(tiny_target_dir), str(regen_data), str(donor), [0, 2], shard_size=16, dtype="float32")
    data = load_file(str(regen_data))  # 40 rows: donor shards 0-1 full, shard 2 holds 8
    tokens = torch.cat([data["tokens"], data["tokens"][:10].flip(1)])  # 50 rows; the last 10 are new
    mask = torch.cat([data["loss_mask"], data["loss_mask"][:10]])
    pad = lambda x: torch.nn.functional.pad(x, (0, 6))  # noqa: E731  wider rows, padding never supervised
    merged = {"tokens": pad(tokens).contiguous(), "loss_mask": pad(mask).contiguous()}
    save_file(merged, str(tmp_path / "merged.safetensors"))
    cache, fresh = tmp_path / "merged-feats", tmp_path / "fresh-feats"
    args = (str(tiny_target_dir), str(tmp_path / "merged.safetensors"))
    meta = extract_features(*args, str(cache), [0, 2], shard_size=16, dtype="float32", reuse=str(donor))
    extract_features(*args, str(fresh), [0, 2], shard_size=16, dtype="float32")
    for si in (0, 1):  # the same file, not a copy
        assert os.stat(cache / f"{si:05d}.safetensors").st_ino == os.stat(donor / f"{si:05d}.safetensors").st_ino
    assert os.stat(cache / "00002.safetensors").st_ino != os.stat(donor / "00002.safetensors").st_ino  # 16 rows vs 8
    assert meta["reused_shards"] == 2 and extraction_report(cache)["timed_shards"] == 2
    idx = torch.arange(50)
    for got, want in zip(FeatureStore(cache, merged["tokens"]).get(idx), FeatureStore(fresh).get(idx), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    other = tmp_path / "other-layers"
    extract_features(str(tiny_target_dir), str(regen_data), str(other), [0, 1], shard_size=16, dtype="float32")
    with pytest.raises(ValueError, match="layer_ids"):
        extract_features(*args, str(tmp_path / "x"), [0, 2], shard_size=16, dtype="float32", reuse=str(other))
    assert not (tmp_path / "x").exists()  # refused before anything was written
    from lilicorr.cli.main import main

    cli = ["data", "features", "--target", str(tiny_target_dir), "--data", args[1], "--out", str(tmp_path / "y")]
    assert main([*cli, "--target-layer-ids", "0,2", "--reuse", str(other)]) == 2  # one `error:` line, exit 2
    assert not (tmp_path / "y").exists()
