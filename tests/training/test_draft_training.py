import json
import math
import os
import socket
from pathlib import Path

import pytest
import torch

from lilicorr.models.head import HeadScores
from lilicorr.training.draft import DraftStep, combine_losses, train_draft
from lilicorr.training.draft_config import DraftTrainConfig, build_model
from lilicorr.training.losses import HeadLossWeights, dflash_loss, head_loss, lattice_truth, sample_anchors


def test_sample_anchors_respect_mask_and_context():
    mask = torch.zeros(3, 20, dtype=torch.bool)
    mask[0, 5:] = True
    mask[1, 10:14] = True  # room for exactly one block of 4 (anchor 9: slots 10..12) and anchor 10 (11..13)
    anchors, valid = sample_anchors(mask, 4, 4, torch.Generator().manual_seed(0))
    for p, v in zip(anchors[0].tolist(), valid[0].tolist(), strict=True):
        assert v and p >= 4 and p + 3 < 20 and mask[0, p + 1 : p + 4].all()
    assert valid[1].sum() == 2 and set(anchors[1][valid[1]].tolist()) == {9, 10}
    assert not valid[2].any()
    assert (anchors[0].diff() > 0).all()


def test_dflash_loss_decay_and_validity():
    logits = torch.zeros(2, 3, 5)
    labels = torch.zeros(2, 3, dtype=torch.long)
    s, w = dflash_loss(logits, labels, torch.tensor([True, False]), gamma=2.0)
    weights = torch.exp(-torch.arange(3) / 2.0)
    assert w == pytest.approx(float(weights.sum()))
    assert s == pytest.approx(float(weights.sum()) * float(torch.log(torch.tensor(5.0))), rel=1e-5)


def test_dflash_soft_labels_mix_the_targets_distribution():
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(2, 3, 7, generator=g), torch.randn(2, 3, 7, generator=g)
    labels, valid = torch.randint(0, 7, (2, 3), generator=g), torch.tensor([True, True])
    hard, w = dflash_loss(logits, labels, valid, gamma=2.0)
    assert dflash_loss(logits, labels, valid, 2.0, target, kd_weight=0.0)[0] == hard  # target ignored
    soft, _ = dflash_loss(logits, labels, valid, 2.0, target, kd_weight=1.0)
    decay = torch.exp(-torch.arange(3) / 2.0)
    expect = (-(target.softmax(-1) * logits.log_softmax(-1)).sum(-1) * decay).sum()
    assert soft == pytest.approx(float(expect), rel=1e-5)
    half, _ = dflash_loss(logits, labels, valid, 2.0, target, kd_weight=0.5)
    assert half == pytest.approx(0.5 * float(hard) + 0.5 * float(soft), rel=1e-5)
    # a target sure of the label gives the hard loss back
    sure = torch.nn.functional.one_hot(labels, 7).float() * 50.0
    assert dflash_loss(logits, labels, valid, 2.0, sure, kd_weight=1.0)[0] == pytest.approx(float(hard), rel=1e-4)


def test_soft_labels_are_the_targets_logits_for_each_slot(tiny_target_dir, regen_data):
    """The slot ``s`` of the block anchored at ``p`` predicts token ``p + s + 1``: its soft label must be the
    target's logits at row ``p + s`` (one row off would teach the drafter the wrong distribution)."""
    from lilicorr.datagen.regenerate import load_regenerated
    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.training.objectives import slot_rows

    cfg = _cfg(tiny_target_dir, regen_data, "unused", "dflash", kd_weight=0.5)
    target = TargetRuntime.load(tiny_target_dir)
    step = DraftStep(cfg, target, build_model(cfg, target))
    data = load_regenerated(regen_data)
    tokens, mask = data["tokens"][:2].long(), data["loss_mask"][:2].bool()
    anchors, valid = sample_anchors(mask, 3, cfg.block_size, torch.Generator().manual_seed(0))
    with torch.no_grad():
        bp = step.block_pass(tokens, anchors, valid)
        soft = bp.lm_head(target, slot_rows(bp.final, anchors, cfg.block_size))  # [b, n·S, V]
        real = target.model(input_ids=tokens).logits  # [b, t, V]
    pos = (anchors[..., None] + torch.arange(cfg.block_size - 1)).flatten(1)  # [b, n·S]
    torch.testing.assert_close(soft, torch.gather(real, 1, pos[..., None].expand(*pos.shape, real.shape[-1])))
    assert torch.isfinite(combine_losses(step(tokens, mask, anchors, valid), cfg))
    with pytest.raises(ValueError, match="--kd-weight"):
        _cfg(tiny_target_dir, regen_data, "unused", "dflash", kd_weight=1.5).validate()


def test_t1_acceptance_estimate_is_the_overlap_of_draft_and_target():
    """``block_metrics``' T = 1 estimate: a slot is accepted with probability Σ min(p, q), a chain's prefix is the
    sum of the running products: identical distributions accept every slot, disjoint ones none, and a half
    overlap gives ½ + ¼ + …; invalid blocks do not count."""
    from lilicorr.training.losses import block_metrics

    m, s, v = 3, 4, 6
    labels, valid = torch.zeros(m, s, dtype=torch.long), torch.tensor([True, True, False])
    z = torch.randn(m, s, v)
    assert float(block_metrics(z, labels, valid, target_logits=z)["t1_prefix"]) == pytest.approx(2 * s, rel=1e-5)
    big = torch.full((m, s, v), -1e4)
    draft, target = big.clone(), big.clone()
    draft[..., 0], target[..., 1] = 0.0, 0.0  # all mass on different tokens
    assert float(block_metrics(draft, labels, valid, target_logits=target)["t1_prefix"]) == pytest.approx(0.0)
    draft[..., 1] = 0.0  # the drafter splits its mass between the two: half of it overlaps
    half = sum(0.5**k for k in range(1, s + 1))
    assert float(block_metrics(draft, labels, valid, target_logits=target)["t1_prefix"]) == pytest.approx(2 * half)


def test_head_loss_supervises_only_truth_prefix():
    ids = torch.tensor([[[4, 5], [6, 7], [8, 9]]])  # [M=1, S=3, K=2]
    labels = torch.tensor([[5, 1, 9]])  # slot 1 truth not in lattice: slots 1, 2 unsupervised
    gt, in_lat, prefix = lattice_truth(ids, labels, torch.tensor([True]))
    assert gt.tolist() == [[1, 0, 1]] and in_lat.tolist() == [[True, False, True]]
    assert prefix.tolist() == [[True, False, False]]
    sc = HeadScores(start=torch.tensor([[0.0, 3.0]]), pair=torch.zeros(1, 2, 2, 2))
    zt = torch.zeros(1, 3, 12)
    s, n = head_loss(sc, ids, labels, zt, torch.tensor([True]), HeadLossWeights(ce=1.0, penalty=0.0))
    assert n == 1 and s == pytest.approx(float(-torch.log_softmax(torch.tensor([0.0, 3.0]), 0)[1]))
    # Penalty: mass on a candidate the target likes less than the truth costs their logit gap.
    zt[0, 0, 5], zt[0, 0, 4] = 2.0, -1.0
    s2, _ = head_loss(sc, ids, labels, zt, torch.tensor([True]), HeadLossWeights(ce=0.0, penalty=1.0))
    assert s2 == pytest.approx(float(torch.softmax(torch.tensor([0.0, 3.0]), 0)[0]) * 3.0, rel=1e-5)


def test_distill_term_is_cross_entropy_from_the_target_over_the_lattice():
    ids = torch.tensor([[[4, 5, 6]]])  # [M=1, S=1, K=3]
    labels = torch.tensor([[5]])
    zt = torch.full((1, 1, 10), -5.0)
    zt[0, 0, 4], zt[0, 0, 5], zt[0, 0, 6] = 1.0, 2.0, 0.0
    start = torch.tensor([[0.5, -1.0, 2.0]])
    sc = HeadScores(start=start, pair=torch.zeros(1, 0, 3, 3))
    s, n = head_loss(sc, ids, labels, zt, torch.tensor([True]), HeadLossWeights(ce=0.0, penalty=0.0, distill=1.0))
    p = torch.softmax(torch.tensor([1.0, 2.0, 0.0]), 0)
    expect = -(p * torch.log_softmax(start[0], 0)).sum()
    assert n == 1 and s == pytest.approx(float(expect), rel=1e-5)
    # the minimum is at the target's own distribution over the candidates
    s_opt, _ = head_loss(
        HeadScores(start=torch.log(p)[None], pair=torch.zeros(1, 0, 3, 3)),
        ids,
        labels,
        zt,
        torch.tensor([True]),
        HeadLossWeights(ce=0.0, penalty=0.0, distill=1.0),
    )
    assert s_opt < s and s_opt == pytest.approx(float(-(p * p.log()).sum()), rel=1e-5)


def _cfg(tiny_target_dir, regen_data, out, mode, steps=30, **kw):
    return DraftTrainConfig(
        target=str(tiny_target_dir),
        data=str(regen_data),
        out=str(out),
        mode=mode,
        run_dir=str(out) + "-run",
        block_size=4,
        candidate_topk=4,
        head_layers=1,
        head_heads=2,
        factor_dim=16,
        steps=steps,
        batch_size=4,
        anchors=4,
        lr=3e-3,
        val_sequences=8,
        checkpoint_minutes=100,
        **{"val_every": 1000, "num_layers": 1, **kw},
    )


def _losses(run):
    import json

    return [json.loads(x)["loss"] for x in (run / "train.log").read_text().splitlines() if '"loss"' in x]


@pytest.mark.parametrize(
    "mode, kw", [("dflash", {}), ("lilicorr", {}), ("dflash", {"kd_weight": 0.5})], ids=["dflash", "lilicorr", "kd"]
)
def test_training_loss_decreases_and_exports(tiny_target_dir, regen_data, tmp_path, mode, kw):
    from lilicorr.checkpoint import load_draft

    summary = train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / mode, mode, steps=40, **kw))
    losses = _losses(tmp_path / f"{mode}-run")
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2
    assert summary["final_val"]["blocks"] > 0
    model = load_draft(tmp_path / mode)
    assert model.is_lilicorr == (mode == "lilicorr")
    if mode == "lilicorr":
        v = summary["final_val"]
        assert 0 <= v["walk_prefix"] <= v["oracle_prefix"] <= 3 and len(v["in_lattice"]) == 3


def test_head_mode_freezes_backbone(tiny_target_dir, regen_data, tmp_path):
    from lilicorr.checkpoint import load_draft

    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "base", "dflash", steps=3))
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "head", "head", steps=5, init=str(tmp_path / "base")))
    base, head = load_draft(tmp_path / "base"), load_draft(tmp_path / "head")
    for k, v in base.state_dict().items():
        assert torch.equal(v, head.state_dict()[k]), k
    assert head.is_lilicorr


def test_lattice_loss_alone_reaches_the_backbone(tiny_target_dir, regen_data, tmp_path):
    from lilicorr.datagen.regenerate import load_regenerated
    from lilicorr.runtime.runtime import TargetRuntime

    # Start from a briefly trained backbone so that truths land in the lattice (supervised slots).
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "warm", "dflash", steps=100))
    cfg = _cfg(tiny_target_dir, regen_data, "unused", "lilicorr", init=str(tmp_path / "warm"))
    target = TargetRuntime.load(tiny_target_dir)
    model = build_model(cfg, target)
    data = load_regenerated(regen_data)
    tok, mask = data["tokens"][-4:].long(), data["loss_mask"][-4:]  # training rows
    anchors, valid = sample_anchors(mask, 4, 4, torch.Generator().manual_seed(0))
    grads = {}
    for scale in (1.0, 0.5, 0.0):
        cfg.head_grad_to_backbone = scale
        model.zero_grad(set_to_none=True)
        res = DraftStep(cfg, target, model)(tok, mask, anchors, valid)
        res.pop("dflash_sum")
        res.pop("dflash_den")
        assert res["head_den"] > 0
        combine_losses(res, cfg).backward()
        g = model.fc.weight.grad
        grads[scale] = (
            torch.zeros_like(model.fc.weight) if g is None else g.clone(),
            model.lilicorr.out_head.weight.grad.clone(),
        )
        if scale == 1.0:  # the reference recipe: the lattice loss alone trains the backbone
            assert g is not None and g.abs().sum() > 0
            assert model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
    # --head-grad-to-backbone scales only what enters the backbone; the head's own gradient is unchanged
    torch.testing.assert_close(grads[0.5][0], 0.5 * grads[1.0][0], rtol=1e-4, atol=1e-7)
    assert grads[0.0][0].abs().sum() == 0
    for scale in (0.5, 0.0):
        torch.testing.assert_close(grads[scale][1], grads[1.0][1])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, cfg):
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    train_draft(cfg)
    torch.distributed.destroy_process_group()


def test_two_processes_equal_one_at_same_global_batch(tiny_target_dir, regen_data, tmp_path):
    import torch.multiprocessing as mp

    from lilicorr.checkpoint import load_draft
    from lilicorr.runtime.runtime import TargetRuntime

    single = _cfg(tiny_target_dir, regen_data, tmp_path / "one", "lilicorr", steps=4, bf16=False)
    train_draft(single)
    double = _cfg(tiny_target_dir, regen_data, tmp_path / "two", "lilicorr", steps=4, bf16=False)
    mp.spawn(_ddp_worker, args=(2, _free_port(), double), nprocs=2, join=True)
    # fp32 master weights from the resumable checkpoints: equal up to float summation order.
    a = {
        k.removeprefix("draft."): v
        for k, v in torch.load(tmp_path / "one-run" / "checkpoint.pt", weights_only=False)["model"].items()
    }
    b = {
        k.removeprefix("draft."): v
        for k, v in torch.load(tmp_path / "two-run" / "checkpoint.pt", weights_only=False)["model"].items()
    }
    init = build_model(single, TargetRuntime.load(tiny_target_dir)).state_dict()
    changed = 0
    for k, v in a.items():
        # Adam divides by sqrt(v): near-zero gradients amplify summation-order noise, hence 1e-4.
        torch.testing.assert_close(b[k], v, atol=1e-4, rtol=1e-4, msg=lambda m, k=k: f"{k}: {m}")
        changed += int(not torch.allclose(v, init[k]))
    assert changed > 10  # the runs really trained
    load_draft(tmp_path / "two")  # rank 0 exported a valid checkpoint


def test_bench_quick_and_draft_card(tiny_target_dir, regen_data, tmp_path):
    import json

    from lilicorr.bench.runner import run_bench
    from lilicorr.cards.draft import write_draft_card

    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "lc", "lilicorr", steps=5))
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "df", "dflash", steps=5))
    prompts = [{"id": f"p{i}", "prompt": "def f(x):" * (i + 1), "category": ("code", "prose")[i % 2]} for i in range(4)]
    res = run_bench(
        str(tiny_target_dir),
        [str(tmp_path / "lc"), str(tmp_path / "df")],
        prompts,
        [0.0, 1.0],
        12,
        out=tmp_path / "bench",
    )
    names = [(r["temperature"], r["arm"]["name"]) for r in res["runs"]]
    assert (0.0, "lc:oracle") in names and (1.0, "lc:oracle") not in names and (1.0, "df") in names
    for r in res["runs"]:
        if r["temperature"] == 0:
            assert r.get("identical_to_ar", True)
    oracle = next(r for r in res["runs"] if r["arm"]["name"] == "lc:oracle")
    walk = next(r for r in res["runs"] if r["arm"]["name"] == "lc" and r["temperature"] == 0)
    assert oracle["pooled"]["tau"] >= walk["pooled"]["tau"]
    assert json.loads((tmp_path / "bench" / "results.json").read_text())["runs"]
    meta = tmp_path / "meta.json"
    meta.write_text(
        json.dumps(
            {
                "sequences": 40,
                "length": 32,
                "sampled_sequences": 20,
                "sha256_16": "x",
                "config": {"target": "t", "out": "o", "num_sequences": 40, "seed": 0},
            }
        )
    )
    write_draft_card(tmp_path / "lc", "lilicorr train draft …", meta, tmp_path / "bench" / "results.json", "bench …")
    card = (tmp_path / "lc" / "MODEL_CARD.md").read_text()
    assert "LiLiCorrDraftModel" in card and "| 0 | oracle |" in card and "lilicorr train draft …" in card
    # `lilicorr card decoding`: only the Decoding section is rewritten, from another bench run
    from lilicorr.cli.main import main

    other = json.loads((tmp_path / "bench" / "results.json").read_text())
    for r in other["runs"]:
        r["arm"]["name"] = r["arm"]["name"].replace("lc:oracle", "lc:oracle@b16+gate")
        if r["arm"]["name"] == "lc:default":  # as if measured before today's default: with adaptive verification
            r["arm"]["enable_adaptive_verification"] = not r["arm"]["enable_adaptive_verification"]
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert (
        main(["card", "decoding", str(tmp_path / "lc"), "--bench", str(tmp_path / "nope.json"), "--bench-command", "x"])
        == 2
    )
    assert (tmp_path / "lc" / "MODEL_CARD.md").read_text() == card  # nothing written on bad input
    assert (
        main(
            [
                "card",
                "decoding",
                str(tmp_path / "lc"),
                "--bench",
                str(tmp_path / "other.json"),
                "--bench-command",
                "new …",
            ]
        )
        == 0
    )
    updated = (tmp_path / "lc" / "MODEL_CARD.md").read_text()
    assert updated.split("## Decoding")[0] == card.split("## Decoding")[0]  # training sections untouched
    assert "| 0 | oracle (tree budget 16, draft gate) |" in updated and "`new …`" in updated
    assert updated.count("## Decoding") == 1 and "`bench …`" not in updated
    assert "| 0 | **today's default**: default |" in card  # the bench's lc:default is today's default
    assert "| 0 | earlier default |" in updated and "today's default" not in updated
    from lilicorr.bench.report import write_report

    page = write_report(tmp_path / "bench" / "results.json", tmp_path / "docs" / "RESULTS.md", "lilicorr bench …")
    text = page.read_text()
    pngs = sorted(p.name for p in (tmp_path / "docs").glob("*.png"))
    assert len(pngs) == 3 and all(f"]({p})" in text for p in pngs)
    assert all((tmp_path / "docs" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


@pytest.mark.parametrize("mode", ["dflash2", "dspark", "domino"])
def test_comparison_arm_training(tiny_target_dir, regen_data, tmp_path, mode):
    from lilicorr.bench.variants import default_variants
    from lilicorr.checkpoint import load_draft
    from lilicorr.models.arms import load_arm

    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / mode, mode, steps=40, arm_rank=8))
    losses = _losses(tmp_path / f"{mode}-run")
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2
    assert not load_draft(tmp_path / mode).is_lilicorr  # the backbone stays a plain DFlashDraftModel
    assert load_arm(tmp_path / mode).kind == mode
    assert [a.name for a in default_variants([str(tmp_path / mode)])][-1] == f"{mode}:{mode}"
    from lilicorr.cards.draft import write_draft_card

    meta = tmp_path / "meta.json"
    meta.write_text(
        '{"sequences": 40, "length": 32, "sampled_sequences": 20, "sha256_16": "x",'
        ' "config": {"target": "t", "out": "o", "num_sequences": 40, "seed": 0}}'
    )
    write_draft_card(tmp_path / mode, "lilicorr train draft …", meta)
    assert f"comparison arm `{mode}`" in (tmp_path / mode / "MODEL_CARD.md").read_text()


def test_comparison_arm_on_a_frozen_backbone(tiny_target_dir, regen_data, tmp_path):
    from lilicorr.checkpoint import load_draft
    from lilicorr.models.arms import load_arm

    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "base", "dflash", steps=3))
    cfg = _cfg(tiny_target_dir, regen_data, tmp_path / "arm", "dspark", steps=20, arm_rank=8)
    cfg.init, cfg.freeze_backbone = str(tmp_path / "base"), True
    train_draft(cfg)
    base, arm = load_draft(tmp_path / "base"), load_draft(tmp_path / "arm")
    for k, v in base.state_dict().items():
        assert torch.equal(v, arm.state_dict()[k]), k
    assert load_arm(tmp_path / "arm").kind == "dspark"
    losses = _losses(tmp_path / "arm-run")
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="comparison arms"):
        _cfg(tiny_target_dir, regen_data, tmp_path / "x", "lilicorr", freeze_backbone=True).validate()
    with pytest.raises(ValueError, match="--init"):
        _cfg(tiny_target_dir, regen_data, tmp_path / "x", "domino", freeze_backbone=True).validate()


def test_bench_quick_cli_end_to_end(tiny_target_dir, regen_data, tmp_path, capsys):
    """`lilicorr bench --quick` on random-weight drafters (plus an arm) → valid JSON, markdown, PNGs."""
    import json

    from lilicorr.cli.main import main

    for mode in ("lilicorr", "dflash2"):
        train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / mode, mode, steps=2, arm_rank=8))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"def g{i}(x):", "category": "code"}) + "\n" for i in range(4))
    )
    out = tmp_path / "bench"
    assert (
        main(
            [
                "bench",
                "--target",
                str(tiny_target_dir),
                "--draft",
                str(tmp_path / "lilicorr"),
                "--draft",
                str(tmp_path / "dflash2"),
                "--prompts",
                str(prompts),
                "--quick",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    names = {r["arm"]["name"] for r in res["runs"]}
    assert {"ar", "lilicorr", "lilicorr:top1", "lilicorr:oracle", "dflash2", "dflash2:dflash2"} <= names
    assert all(r.get("identical_to_ar", True) for r in res["runs"])
    assert {r["concurrency"] for r in res["sweep"]} == {1, 2}
    assert main(["report", str(out / "results.json"), "--out", str(tmp_path / "docs" / "RESULTS.md")]) == 0
    assert len(list((tmp_path / "docs").glob("*.png"))) == 4


def test_per_module_clipping_groups_and_training(tiny_target_dir, regen_data, tmp_path):
    from lilicorr.training.draft import _param_groups

    cfg = _cfg(tiny_target_dir, regen_data, tmp_path / "pm", "lilicorr", steps=40)
    cfg.clip_per_module, cfg.head_grad_to_backbone = True, 0.25
    from lilicorr.runtime.runtime import TargetRuntime

    model = build_model(cfg, TargetRuntime.load(tiny_target_dir))
    backbone, head = _param_groups(torch.nn.ModuleDict({"draft": model}))
    names = {id(p): n for n, p in model.named_parameters()}
    assert head and all(names[id(p)].startswith("lilicorr.") for p in head)
    assert backbone and not any(names[id(p)].startswith("lilicorr.") for p in backbone)
    assert len(backbone) + len(head) == len(names)
    summary = train_draft(cfg)
    losses = _losses(tmp_path / "pm-run")
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2
    assert summary["config"]["clip_per_module"] and summary["config"]["head_grad_to_backbone"] == 0.25


def test_learning_curves_log_positions_and_plot(tiny_target_dir, regen_data, tmp_path):
    """Validation points carry supervised positions (global batch: every valid block's slots), minutes, τ and
    the neighbouring-slot repeat rate; `lilicorr report --curves` draws several runs into one PNG, and a run with a
    LiLiCorr head also its walk's τ (a head on a frozen backbone has a flat top-1 curve: its walk is what moves)."""
    from lilicorr.cli.main import main
    from lilicorr.training.curves import read_curve

    for name, mode in (("a", "dflash"), ("b", "lilicorr")):
        train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / name, mode, steps=6, val_every=3))
    pts = read_curve(tmp_path / "a-run")
    assert [p["step"] for p in pts] == [3, 6]
    assert all(1.0 <= p["tau_t1_sampled"] <= 4.0 for p in pts)  # T = 1 estimate on the sampled held-out rows
    assert 0 < pts[0]["positions"] < pts[1]["positions"] <= 6 * 4 * 4 * 3  # steps · batch · anchors · slots
    assert all(0.0 <= p["neighbour_same"] <= 1.0 and p["tau"] >= 1.0 for p in pts)
    png = tmp_path / "curves.png"
    assert main(["report", "--curves", str(tmp_path / "a-run"), str(tmp_path / "b-run"), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["report", "--curves", str(tmp_path / "missing"), "--out", str(png)]) == 2
    page = tmp_path / "curves.md"
    runs = [str(tmp_path / "a-run"), str(tmp_path / "b-run")]
    assert main(["report", "--curves", *runs, "--out", str(png), "--table", str(page), "--title", "T"]) == 0
    rows = [x for x in page.read_text().splitlines() if x.startswith("| a-run") or x.startswith("| b-run")]
    assert len(rows) == 2 and f"| {pts[-1]['tau']:.4f} |" in rows[0] and "curves.png" in page.read_text()
    assert f"| {pts[-1]['tau_greedy']:.4f} / {pts[-1]['tau_sampled']:.4f} |" in rows[0]  # per kind of held-out row
    walk = read_curve(tmp_path / "b-run")
    assert pts[-1]["walk_tau"] is None and walk[-1]["walk_tau"] >= 1.0 and walk[-1]["walk_tau_greedy"] >= 1.0
    assert "| — | — |" in rows[0] and "| — |" not in rows[1] and f"| {walk[-1]['walk_tau_greedy']:.4f} |" in rows[1]


def test_a_resumed_runs_curve_keeps_the_retrained_points_only(tmp_path):
    """A run cut after its checkpoint at step 500 logged validations at 500 and 600; resumed, it retrained from 500
    and logged 500, 600 and 700 again. The curve holds each step once, the resumed run's value."""
    from lilicorr.training.curves import read_curve

    run = tmp_path / "run"
    run.mkdir()
    recs = [(400, 1.1), (500, 1.2), (600, 1.3), (500, 1.25), (600, 1.35), (700, 1.4)]
    lines = [json.dumps({"event": "start", "config": {}})]
    lines += [json.dumps({"step": s, "elapsed_s": s, "val": {"tau_top1_estimate": t}}) for s, t in recs]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    pts = read_curve(run)
    assert [(p["step"], p["tau"]) for p in pts] == [(400, 1.1), (500, 1.25), (600, 1.35), (700, 1.4)]


def _vocab_passes(tiny_target_dir, regen_data, **kw):
    """A lilicorr step with a 16-token training vocabulary (and ``kw``), and its block pass over 4 rows in eval
    (full vocabulary) and in training (the training vocabulary)."""
    from lilicorr.datagen.regenerate import load_regenerated
    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.training.draft import frequent_tokens

    cfg = _cfg(tiny_target_dir, regen_data, "unused", "lilicorr", train_vocab=16, **kw)
    target = TargetRuntime.load(tiny_target_dir)
    model = build_model(cfg, target)
    step = DraftStep(cfg, target, model)
    data = load_regenerated(regen_data)
    tokens, mask = data["tokens"][:4].long(), data["loss_mask"][:4].bool()
    step.frequent = frequent_tokens(tokens, mask, 16, model.cfg.vocab_size)
    anchors, valid = sample_anchors(mask, 4, cfg.block_size, torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.eval()
        full = step.block_pass(tokens, anchors, valid)
        model.train()
        sub = step.block_pass(tokens, anchors, valid)
    return cfg, model, step, full, sub, (tokens, mask, anchors, valid)


def test_training_vocabulary_is_a_column_subset_of_the_full_logits(tiny_target_dir, regen_data):
    """``--train-vocab``: while training, logits are the full logits' columns at the frequent tokens + the
    batch's labels, and labels index that subset; in eval (validation) the full vocabulary comes back."""
    cfg, model, step, full, sub, (tokens, mask, anchors, valid) = _vocab_passes(tiny_target_dir, regen_data)
    assert full.vocab is None and full.logits.shape[-1] == model.cfg.vocab_size
    assert sub.vocab is not None and len(sub.vocab) < model.cfg.vocab_size
    assert set(step.frequent.tolist()) <= set(sub.vocab.tolist())
    assert torch.equal(sub.token_ids(sub.labels), full.labels)
    torch.testing.assert_close(sub.logits, full.logits[..., sub.vocab])
    # the LiLiCorr objective reads the same subset: a whole step runs and gives a finite loss
    assert torch.isfinite(combine_losses(step(tokens, mask, anchors, valid), cfg))


def test_sampled_negatives_estimate_the_full_normaliser(tiny_target_dir, regen_data):
    """``--train-vocab-negatives R``: each step adds R tokens from outside the kept set (frequent + labels) with
    logit offset log(rest / R); the offset logits' exp-sum is an unbiased estimate of the full vocabulary's (so
    the CE and the head's log-prob features see the full normaliser on average), rankings stay raw, and the
    kept set, labels and anchors are those of the run without negatives."""
    import math

    cfg, model, step, full, sub, (tokens, mask, anchors, valid) = _vocab_passes(
        tiny_target_dir, regen_data, train_vocab_negatives=8
    )
    kept = torch.unique(torch.cat([step.frequent, full.labels.flatten()]))
    rest = model.cfg.vocab_size - len(kept)
    assert len(sub.vocab) == len(kept) + 8 and set(kept.tolist()) <= set(sub.vocab.tolist())
    negative = ~torch.isin(sub.vocab, kept)
    assert int(negative.sum()) == 8 and torch.equal(sub.offset[~negative], torch.zeros(len(kept)))
    torch.testing.assert_close(sub.offset[negative], torch.full((8,), math.log(rest / 8)))
    assert torch.equal(sub.token_ids(sub.labels), full.labels)
    torch.testing.assert_close(sub.logits, full.logits[..., sub.vocab])  # raw: the lattice ranks these
    # unbiased normaliser: the mean over draws of Σ exp(z + offset) is the full Σ exp(z)
    z = full.logits.float()[:2, :2]  # [2, 2, V] a few slots
    est = torch.zeros(z.shape[:-1])
    draws = 3000
    for _ in range(draws):
        vocab, offset = step.training_vocab(full.labels)
        est += torch.exp(z[..., vocab] + offset).sum(-1) / draws
    torch.testing.assert_close(est, torch.exp(z).sum(-1), rtol=0.05, atol=0.0)
    assert torch.isfinite(combine_losses(step(tokens, mask, anchors, valid), cfg))
    # a step's negatives are a function of (seed, step): a resumed run draws what the uncut run drew
    step.seed_negatives(3)
    at3 = step.training_vocab(full.labels)[0]
    step.seed_negatives(4)
    assert not torch.equal(step.training_vocab(full.labels)[0], at3)
    step.seed_negatives(3)
    assert torch.equal(step.training_vocab(full.labels)[0], at3)
    with pytest.raises(ValueError, match="train-vocab-negatives"):
        DraftTrainConfig(target="t", data="d", out="o", mode="dflash", train_vocab_negatives=8).validate()


def test_training_vocabulary_is_refused_for_arms():
    with pytest.raises(ValueError, match="train-vocab"):
        DraftTrainConfig(target="t", data="d", out="o", mode="dspark", train_vocab=64).validate()


def test_time_budget_stops_the_run_validates_and_decays_the_lr(tiny_target_dir, regen_data, tmp_path):
    """``--max-minutes``: the run stops on wall time, not steps, with a final validation, and the LR schedule
    is spread over the budget (equal-wall-time comparisons of recipes)."""
    import json

    from lilicorr.training.draft_config import lr_at

    cfg = _cfg(tiny_target_dir, regen_data, tmp_path / "d", "dflash", steps=10**6, max_minutes=0.1, val_every=10**6)
    summary = train_draft(cfg)
    assert 0 < summary["steps"] < 10**6 and summary["final_val"]["blocks"] > 0
    assert 5 <= summary["wall_time_s"] < 30
    records = [json.loads(x) for x in (tmp_path / "d-run" / "train.log").read_text().splitlines()]
    lrs = [r["lr"] for r in records if "step" in r and "lr" in r]
    assert max(lrs) > lrs[-1] >= 0
    assert lr_at(0, cfg, 0.0) > 0 and lr_at(0, cfg, 6.0) == pytest.approx(0.0, abs=1e-12)
    half = (0.5 - cfg.warmup_ratio) / (1 - cfg.warmup_ratio)  # 3 s of the 6 s budget, past the warm-up
    assert lr_at(0, cfg, 3.0) == pytest.approx(cfg.lr * 0.5 * (1 + math.cos(math.pi * half)), rel=1e-6)


def test_validation_reads_val_data_when_given(tiny_target_dir, regen_data, tmp_path):
    """``--val-data``: held-out rows come from another file (fixed answers trained, validated on the target's
    own answers); here a copy whose rows supervise nothing gives zero validation blocks."""
    from safetensors.torch import save_file

    from lilicorr.datagen.regenerate import load_regenerated

    data = load_regenerated(regen_data)
    empty = tmp_path / "unsupervised.safetensors"
    save_file(
        {**{k: v.contiguous() for k, v in data.items()}, "loss_mask": torch.zeros_like(data["loss_mask"])}, str(empty)
    )
    own = train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "a", "dflash", steps=2))
    other = train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / "b", "dflash", steps=2, val_data=str(empty)))
    assert own["final_val"]["blocks"] > 0 and other["final_val"]["blocks"] == 0
    with pytest.raises(ValueError, match="val-data"):
        _cfg(tiny_target_dir, regen_data, tmp_path / "c", "dflash", val_features="x").validate()


def test_init_from_target_copies_the_last_layers_and_final_norm(tiny_target_dir, regen_data):
    from lilicorr.runtime.runtime import TargetRuntime

    target = TargetRuntime.load(tiny_target_dir)
    cfg = _cfg(tiny_target_dir, regen_data, "unused", "dflash", num_layers=2, init_from_target=True)
    model = build_model(cfg, target)
    src, n = target.model.state_dict(), target.num_layers
    for j in range(2):
        for part in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"):
            assert torch.equal(model.state_dict()[f"layers.{j}.{part}"], src[f"model.layers.{n - 2 + j}.{part}"])
    assert torch.equal(model.norm.weight, src["model.norm.weight"])
    plain = build_model(_cfg(tiny_target_dir, regen_data, "unused", "dflash", num_layers=2), target)
    assert not torch.equal(
        plain.state_dict()["layers.1.self_attn.q_proj.weight"], src[f"model.layers.{n - 1}.self_attn.q_proj.weight"]
    )
    assert torch.equal(plain.fc.weight, model.fc.weight)  # the fusion has no counterpart: same random init


def test_draft_card_records_merged_data_the_rows_used_and_the_curve(tiny_target_dir, regen_data, tmp_path):
    """A drafter trained on a prefix of a merged file: its card names the merge and its inputs, the rows it
    trained on, the training vocabulary, and the held-out curve of its run folder."""
    from lilicorr.cards.draft import write_draft_card
    from lilicorr.datagen.merge import merge_data

    merged = tmp_path / "merged.safetensors"
    merge_data([str(regen_data), str(regen_data)], str(merged))
    cfg = _cfg(tiny_target_dir, merged, tmp_path / "df", "dflash", steps=6, val_every=2, max_sequences=24)
    cfg.train_vocab = 64
    train_draft(cfg)
    write_draft_card(tmp_path / "df", None, Path(f"{merged}.json"))
    card = (tmp_path / "df" / "MODEL_CARD.md").read_text()
    assert f"lilicorr data merge {regen_data} {regen_data} --out {merged}" in card
    assert "first 24 of 80 rows (the first 8 held out)" in card and "64-token training vocabulary" in card
    curve = card[card.index("| step | positions (M)") :].splitlines()[2:]
    assert [row.split(" | ")[0] for row in curve[:3]] == ["| 2", "| 4", "| 6"]
    assert "## Draft vocabulary" not in card
    from lilicorr.decoding.draft_vocab import write_draft_vocab

    write_draft_vocab(tmp_path / "df", [5, 3, 9], {"data": ["p.jsonl"], "rows": 2, "tokens_counted": 6, "target": "t"})
    write_draft_card(tmp_path / "df", None, Path(f"{merged}.json"))
    card = (tmp_path / "df" / "MODEL_CARD.md").read_text()
    assert "## Draft vocabulary" in card and "the 3 most frequent token ids" in card and "--data p.jsonl" in card
    # the v3 shape (scripts/ship_smollm2.sh): a file of the greedy rows, validated on the mixed file's first rows
    greedy = tmp_path / "greedy.safetensors"
    merge_data([str(merged)], str(greedy), rows="greedy")
    cfg = _cfg(tiny_target_dir, greedy, tmp_path / "g", "dflash", steps=2, val_data=str(merged), train_rows="greedy")
    summary = train_draft(cfg)
    assert summary["final_val"]["greedy"]["blocks"] > 0 and summary["final_val"]["sampled"]["blocks"] > 0
    write_draft_card(tmp_path / "g", None, Path(f"{greedy}.json"))
    card = (tmp_path / "g" / "MODEL_CARD.md").read_text()
    assert f"lilicorr data merge {merged} --rows greedy --out {greedy}`, the greedy rows (of 80)" in card
    assert f"| validation data | the first 8 rows of `{merged}` |" in card


def test_training_rows_pick_greedy_or_sampled_rows_after_the_held_out_ones():
    from lilicorr.training.batches import training_rows

    sampled = torch.tensor([False, True, False, True, True, False])
    assert training_rows(sampled, 2, "all").tolist() == [2, 3, 4, 5]
    assert training_rows(sampled, 2, "greedy").tolist() == [2, 5]
    assert training_rows(sampled, 2, "sampled").tolist() == [3, 4]
    with pytest.raises(ValueError, match="no sampled row"):
        training_rows(torch.zeros(6, dtype=torch.bool), 2, "sampled")


@pytest.mark.parametrize("which", ["greedy", "sampled"])
def test_train_rows_feeds_only_the_chosen_rows(tiny_target_dir, regen_data, tmp_path, monkeypatch, which):
    """``--train-rows``: every training batch holds only greedy (or only sampled) rows, never a held-out one."""
    from lilicorr.training import draft as draft_module

    seen: list[int] = []
    real_get = draft_module.Batches.get

    def spy(self, idx, length=None):
        seen.extend(int(i) for i in idx)
        return real_get(self, idx, length)

    monkeypatch.setattr(draft_module.Batches, "get", spy)
    train_draft(_cfg(tiny_target_dir, regen_data, tmp_path / which, "dflash", steps=6, train_rows=which))
    trained = [i for i in seen if i >= 8]  # validation reads rows 0..7 (val_sequences=8)
    assert len(trained) == 6 * 4  # 6 steps × batch 4
    assert {i % 2 == 1 for i in trained} == {which == "sampled"}  # the fixture samples the odd rows at T=1


def test_validation_splits_greedy_and_sampled_rows_over_the_same_blocks(tiny_target_dir, regen_data):
    """Held-out metrics per kind of row (T=0 decoding is judged on the greedy rows) add up to the unsplit
    figures over exactly the same blocks: splitting a batch by kind must not move an anchor or a row."""
    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.training.batches import Batches
    from lilicorr.training.validation import VAL_ANCHORS, validate

    cfg = _cfg(tiny_target_dir, regen_data, "unused", "lilicorr")
    target = TargetRuntime.load(tiny_target_dir)
    model = build_model(cfg, target)
    step, batches = DraftStep(cfg, target, model), Batches(cfg, model.cfg.target_layer_ids, "cpu")
    val_idx = torch.arange(8)
    out = validate(step, batches, val_idx, cfg)
    # the unsplit reference: each batch in one pass, anchors from the same seeded generator
    gen, sums = torch.Generator().manual_seed(12345), {}
    model.eval()
    with torch.no_grad():
        for i in range(0, 8, cfg.batch_size):
            tk, mk, _ = batches.get(val_idx[i : i + cfg.batch_size])
            anchors, valid = sample_anchors(mk, VAL_ANCHORS, step.block, gen)
            for k, v in step(tk, mk, anchors, valid, want_metrics=True).items():
                sums[k] = sums.get(k, 0) + v
    assert out["blocks"] == int(sums["m_blocks"]) == out["greedy"]["blocks"] + out["sampled"]["blocks"]
    assert out["greedy"]["blocks"] > 0 and out["sampled"]["blocks"] > 0
    assert out["top1_prefix"] == pytest.approx(float(sums["m_top1_prefix"]) / float(sums["m_blocks"]), abs=1e-4)
    assert out["walk_prefix"] == pytest.approx(float(sums["m_walk_prefix"]) / float(sums["m_blocks"]), abs=1e-4)
    parts = sum(out[k]["top1_prefix"] * out[k]["blocks"] for k in ("greedy", "sampled")) / out["blocks"]
    assert parts == pytest.approx(out["top1_prefix"], abs=1e-3)
