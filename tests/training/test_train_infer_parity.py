"""Training sees exactly what inference sees — the known bugs that gave public DFlash trainers near-zero
acceptance, each injected to show that this test catches it.

The engine drafts (a random drafter, fp32) while decoding a prompt; a spy records each draft's logits and
the position of its anchor. The training code's block pass over the finished sequence, with all those
anchors at once, must give the same logits (same target taps, positions, mask token, LM head, and no block
seeing another), and its labels must be the tokens that follow each anchor. Then a learning test that can
fail: a drafter must learn a simple rule in seconds, and must not when trained with a known bug.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import lilicorr.training.draft as draft_mod
from lilicorr.decoding.build import build_engine, build_proposer
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.features.cache import target_features
from lilicorr.models.backbone import training_block_mask
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.draft import DraftStep
from lilicorr.training.draft_config import DraftTrainConfig, build_model
from lilicorr.training.losses import block_labels

BLOCK = 4


TARGET = Path(__file__).resolve().parents[2] / "models" / "tiny-s"  # a trained target: varied continuations


@pytest.fixture(scope="module")
def drafted():
    """(target, drafter, cfg, sequence, anchor positions, the engine's draft logits per anchor)."""
    torch.manual_seed(0)
    target = TargetRuntime.load(TARGET)
    cfg = DraftTrainConfig(target=str(TARGET), data="unused", out="unused", mode="dflash", num_layers=1,
                           block_size=BLOCK, bf16=False, seed=3)  # fmt: skip
    model = build_model(cfg, target).eval()
    spec = SpecConfig(method="dflash", num_speculative_tokens=BLOCK - 1)
    proposer = build_proposer(target, model, spec)
    prompt = target.tokenizer.encode('def parse_header(line):\n    """Split a header line', add_special_tokens=False)
    records: list[tuple[int, int, torch.Tensor]] = []  # (outputs so far, anchor token, logits [S, V])
    propose = proposer.propose

    def spy(out, *args, **kwargs):
        req = out.requests[0]
        records.append((len(req.output_ids), int(out.anchor_tokens[0]), out.logits[0].clone()))
        return propose(out, *args, **kwargs)

    proposer.propose = spy
    engine = build_engine(target, spec, model, proposer=proposer)
    req = Request(prompt, SamplingParams(max_tokens=24, temperature=1.0, seed=0))  # sampled: no repeated tokens
    engine.generate([req])
    seq = torch.tensor(prompt + req.output_ids)
    # the pending token (the block's anchor) is the newest output: position len(prompt) + emitted − 1
    anchors = [len(prompt) + n - 1 for n, _, _ in records]
    anchors = [a for a in anchors if a + BLOCK - 1 < len(seq)]  # blocks whose labels exist
    for a, (_, tok, _) in zip(anchors, records, strict=False):
        assert int(seq[a]) == tok
    logits = torch.stack([lg for (_, _, lg) in records[: len(anchors)]])  # [N, S, V]
    assert len(anchors) >= 4
    assert len(set(seq.tolist())) > len(seq) // 2  # varied tokens, so a shifted label cannot match by chance
    return target, model, cfg, seq, anchors, logits


def _block_pass(drafted):
    target, model, cfg, seq, anchors, _ = drafted
    step = DraftStep(cfg, target, model)
    a = torch.tensor([anchors])
    with torch.no_grad():
        return step.block_pass(seq[None], a, torch.ones_like(a, dtype=torch.bool))


def _parity(drafted) -> None:
    *_, seq, anchors, engine_logits = drafted
    bp = _block_pass(drafted)
    torch.testing.assert_close(bp.logits, engine_logits, rtol=1e-4, atol=1e-4)
    labels = torch.stack([seq[a + 1 : a + BLOCK] for a in anchors])
    assert torch.equal(bp.labels, labels), "labels are not the tokens after each anchor"


def test_training_block_pass_equals_the_engine_draft(drafted):
    _parity(drafted)


def _shifted_taps(model, tokens, layer_ids):
    taps, final = target_features(model, tokens, layer_ids)
    return torch.roll(taps, -1, dims=1), final  # position p sees p + 1's hidden states


def _leaky_mask(anchors, ctx_len, block):
    m = training_block_mask(anchors, ctx_len, block)
    m[..., ctx_len:] = True  # every block sees every other block
    return m


def _labels_off_by_one(tokens, anchors, block):
    return block_labels(tokens, anchors + 1, block)


@pytest.mark.parametrize(
    "bug",
    ["hidden states shifted by one", "anchors leaking across blocks", "labels off by one", "LM head left random"],
)
def test_each_known_bug_breaks_parity(drafted, bug, monkeypatch):
    target = drafted[0]
    if bug == "hidden states shifted by one":
        monkeypatch.setattr("lilicorr.features.cache.target_features", _shifted_taps)
    elif bug == "anchors leaking across blocks":
        monkeypatch.setattr(draft_mod, "training_block_mask", _leaky_mask)
    elif bug == "labels off by one":
        monkeypatch.setattr(draft_mod, "block_labels", _labels_off_by_one)
    else:
        head = target.lm_head
        random = torch.nn.Linear(head.in_features, head.out_features, bias=False)
        monkeypatch.setattr(type(target), "lm_head", property(lambda self: random))
    with pytest.raises(AssertionError):
        _parity(drafted)


# -- a learning test that can fail ---------------------------------------------------------------------
# A rule the drafter can learn in seconds: every next token is a fixed permutation of the current one (16
# tokens of tiny-s's vocabulary), so slot k of an anchor a must predict perm^k(a). Judged by the rule itself,
# not by the training code's labels, so a trainer that learns the wrong thing fails here.
RULE_TOKENS, RULE_BASE = 16, 300


def _rule_data(path: Path) -> torch.Tensor:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(RULE_TOKENS, generator=g)
    rows = []
    for _ in range(256):
        t = [int(torch.randint(RULE_TOKENS, (1,), generator=g))]
        while len(t) < 40:
            t.append(int(perm[t[-1]]))
        rows.append([RULE_BASE + x for x in t])
    tokens = torch.tensor(rows, dtype=torch.int32)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.zeros(len(rows), dtype=torch.bool)}, str(path))
    return perm


def _rule_config(tmp_path: Path, **changes) -> DraftTrainConfig:
    cfg = DraftTrainConfig(target=str(TARGET), data=str(tmp_path / "rule.safetensors"), out=str(tmp_path / "d"),
                           mode="dflash", run_dir=str(tmp_path / "run"), num_layers=1, block_size=BLOCK, steps=150,
                           batch_size=8, anchors=8, lr=3e-3, val_sequences=32, val_every=1000,
                           checkpoint_minutes=100, bf16=False, threads=1, seed=0)  # fmt: skip
    return replace(cfg, **changes)


def _train_rule(tmp_path: Path, **changes) -> torch.Tensor:
    """Train a DFlash drafter on the rule (150 steps, seconds); returns the rule."""
    from lilicorr.training.draft import train_draft

    perm = _rule_data(tmp_path / "rule.safetensors")
    train_draft(_rule_config(tmp_path, **changes))
    return perm


def _rule_accuracy(tmp_path: Path, perm: torch.Tensor) -> float:
    """The share of the trained drafter's slots that follow the rule (the inference path's LM head and
    inputs; the training code's labels play no part)."""
    from lilicorr.checkpoint import load_draft

    target = TargetRuntime.load(TARGET)
    model = load_draft(tmp_path / "d", target.model.config).eval()
    tokens = torch.tensor([[RULE_BASE + int(x) for x in _orbit(perm, start, 40)] for start in range(RULE_TOKENS)])
    anchors = torch.arange(1, 36, 5).expand(len(tokens), -1)  # [rows, 7]
    with torch.no_grad():
        bp = DraftStep(_rule_config(tmp_path), target, model).block_pass(
            tokens, anchors, torch.ones_like(anchors, dtype=torch.bool)
        )
    pred = bp.logits.argmax(-1) - RULE_BASE  # [blocks, S]
    first = torch.gather(tokens, 1, anchors).flatten() - RULE_BASE
    want = torch.stack([_power(perm, first, k) for k in range(1, BLOCK)], 1)
    return float((pred == want).float().mean())


def _orbit(perm: torch.Tensor, start: int, n: int) -> list[int]:
    out = [start]
    while len(out) < n:
        out.append(int(perm[out[-1]]))
    return out


def _power(perm: torch.Tensor, x: torch.Tensor, k: int) -> torch.Tensor:
    for _ in range(k):
        x = perm[x]
    return x


def test_drafter_learns_a_rule_in_seconds(tmp_path):
    assert _rule_accuracy(tmp_path, _train_rule(tmp_path)) >= 0.95


def test_a_training_vocabulary_learns_what_the_full_vocabulary_drafts(tmp_path):
    """``--train-vocab``: logits over the frequent tokens + the batch's labels while training; the engine's
    full-vocabulary draft must still follow the rule (the other tokens' logits were never pushed down)."""
    assert _rule_accuracy(tmp_path, _train_rule(tmp_path, train_vocab=32)) >= 0.95


@pytest.mark.parametrize("bug", ["labels off by one", "LM head left random"])
def test_the_rule_is_not_learned_with_a_known_bug(tmp_path, bug, monkeypatch):
    with monkeypatch.context() as m:
        if bug == "labels off by one":
            m.setattr(draft_mod, "block_labels", _labels_off_by_one)
        else:
            head = TargetRuntime.load(TARGET).lm_head
            random = torch.nn.Linear(head.in_features, head.out_features, bias=False)
            m.setattr(TargetRuntime, "lm_head", property(lambda self: random))
        perm = _train_rule(tmp_path)  # trained under the bug ...
    assert _rule_accuracy(tmp_path, perm) < 0.5  # ... judged without it
