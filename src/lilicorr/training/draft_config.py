"""What ``lilicorr train draft`` is asked (``DraftTrainConfig``, every option declared once) and the
drafter it builds from that and the target: geometry, mask token, initial weights (``--init``).

Targets without a mask token (most chat models) get a rarely used special token of their own vocabulary
as DFlash's mask (``MASK_TOKEN_FALLBACKS``), since the vocabulary — the shared LM head — must not change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.datagen.regenerate import ROW_KINDS
from lilicorr.models.config import DraftConfig, LiLiCorrGeometry
from lilicorr.models.draft import DraftModel, default_layer_ids_for
from lilicorr.options import option
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.losses import HeadLossWeights
from lilicorr.training.modes import MODES, get_mode

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class DraftTrainConfig:
    """Every option of ``lilicorr train draft``: the CLI options and a card's recorded command are generated
    from these fields (``lilicorr/options.py``)."""

    target: str = option(help="target folder (Hugging Face causal LM)")
    data: str = option(help="file made by `lilicorr data regenerate`")
    out: str = option(help="drafter folder to write")
    mode: str = option(
        help="what trains (training/modes.py): " + "; ".join(f"{m.name}: {m.help}" for m in MODES.values()),
        choices=tuple(MODES),
    )
    run_dir: str = option("", "run folder with checkpoints and logs (default: runs/<out name>)")
    init: str | None = option(None, "start from this draft checkpoint (required for --mode head / frozen arms)")
    init_from_target: bool = option(False, "draft layers and final norm start as copies of the target's last ones")
    # geometry
    num_layers: int = option(2, "drafter layers", always=True)
    block_size: int = option(8, "DFlash block size", always=True)
    conv_kernel_size: int = option(0, "DFlash2 grouped dynamic convolution taps (0: off; DFlash2: 2)")
    conv_group_size: int = option(0, "DFlash2 convolution channel group (DFlash2: 16)")
    target_layer_ids: list[int] | None = option(None, "tapped target layers, comma-separated (default: spread)")
    candidate_topk: int = option(8, "LiLiCorr / arms: candidates per slot (K)")
    head_hidden_size: int = option(0, "LiLiCorr head width (0: the drafter's hidden size)")
    head_layers: int = option(2, "LiLiCorr lattice-transformer layers")
    head_heads: int = option(4, "LiLiCorr lattice-transformer heads")
    head_mlp_ratio: float = option(2.0, "LiLiCorr lattice-transformer MLP ratio")
    factor_dim: int = option(64, "LiLiCorr in/out vector size")
    arm_rank: int = option(64, "comparison arms (dflash2, dspark, domino): low-rank width")
    logit_scale: float = option(8.0, "LiLiCorr pair-score scale")
    vector_eps: float = option(1e-4, "LiLiCorr vector-norm epsilon")
    # optimisation
    steps: int = option(1000, "optimiser steps", always=True)
    max_minutes: float = option(0.0, "time budget: stop after N minutes of training, the LR schedule spread over them")
    # A campaign (``lilicorr train campaign``) plans its LR schedule over many hours but trains in segments, arm
    # after arm: ``stop_at`` ends this process at a step (checkpointed, the drafter folder written) while the
    # schedule stays planned over ``steps``; resuming with a later ``stop_at`` continues the same run.
    stop_at: int = option(0, "stop (checkpoint and write --out) at this step; the LR schedule stays over --steps")
    # "wsd" (warm-up, stable, decay): a constant LR for most of the plan, decayed linearly over its last
    # ``decay_ratio``, so a long campaign is not spent at a cosine's vanishing LRs and a warm start from a
    # finished drafter keeps learning; "cosine" is the recipe of every drafter before the campaign.
    lr_schedule: str = option("cosine", "cosine (warm-up then cosine to 0) or wsd (warm-up, constant, linear decay)",
                              choices=("cosine", "wsd"))  # fmt: skip
    decay_ratio: float = option(0.2, "wsd: share of the plan over which the LR decays linearly to 0")
    batch_size: int = option(8, "global batch (split across torchrun processes)", always=True)
    anchors: int = option(16, "anchors (blocks) per sequence", always=True)
    lr: float = option(6e-4, "peak learning rate", always=True)
    warmup_ratio: float = option(0.04, "linear warm-up share of the steps, then cosine")
    weight_decay: float = option(0.0, "AdamW weight decay")
    grad_clip: float = option(1.0, "gradient-norm clip")
    gamma: float = option(4.0, "DFlash position-decay γ of the loss", always=True)
    # Soft labels: the target's own next-token distribution at each slot (rebuilt from its cached final
    # hidden state, over the training vocabulary when one is set) mixed into the DFlash cross-entropy.
    # ModelOpt's DFlash recipe distills from the target's logits; 0 is hard labels (the regenerated text).
    kd_weight: float = option(
        0.0, "DFlash loss: weight of the target's distribution as soft labels (0: hard labels, 1: distillation only)"
    )
    # Scale on the head loss's gradient where it enters the backbone (pass hidden, live log-probs,
    # anchor). 1.0 is the reference recipe (ModelOpt); 0.0 trains the head jointly but lets only the
    # DFlash loss shape the backbone. Applies to the comparison arms' losses the same way.
    head_grad_to_backbone: float = option(
        1.0, "scale of the head/arm loss gradient entering the backbone (1 = reference recipe, 0 = stop-gradient)"
    )
    # Clip the backbone's and the head's (or arm's) gradients each to ``grad_clip`` instead of one
    # global norm. The reference clips globally; on small drafters the head's gradient norm is as large
    # as the backbone's, so a global clip shrinks the backbone's DFlash step every step.
    clip_per_module: bool = option(False, "clip backbone and head/arm gradients separately (reference: one norm)")
    head_weights: HeadLossWeights = option(HeadLossWeights)
    seed: int = option(0, "seed of initialisation, anchors and batches", always=True)
    val_sequences: int = option(64, "held-out sequences for validation (the first rows; never trained on)")
    val_data: str | None = option(None, "validate on the first rows of this data file instead (default: --data)")
    val_features: str | None = option(None, "feature cache of --val-data (default: online)")
    val_every: int = option(200, "validate every N steps")
    checkpoint_minutes: float = option(4.0, "resumable checkpoint every N minutes")
    threads: int = option(0, "torch threads per process (0: the cores, divided among torchrun processes)")
    # Training-time candidate vocabulary: the LM head + CE over the N most frequent answer tokens (plus
    # each batch's labels) instead of all V — the drafter step's dominant cost. Validation and the
    # shipped checkpoint keep the full vocabulary, so vLLM / SGLang load it unchanged.
    train_vocab: int = option(0, "logits over the N most frequent answer tokens + the batch's labels (0: all)")
    # The rest of the vocabulary is otherwise never pushed down: the v3 drafters (8 k) put 28 % of their
    # probability on it at inference (diffuse: its top 2 000 tokens hold a quarter of that), against 4 % for the
    # target, which shifts the head's log-prob features by 0.36 nats and costs T = 1 acceptance. R uniform
    # samples of the rest join each step's vocabulary with logit offset log(rest / R): a sampled softmax
    # whose normaliser estimates the full one without bias.
    train_vocab_negatives: int = option(
        0, "with --train-vocab: N uniformly sampled other tokens a step (sampled softmax)"
    )
    bf16: bool = option(True, "no bf16 autocast (faster on CPUs without AMX/AVX512-bf16)", flag="--fp32", invert=True)
    max_sequences: int = option(0, "train on the first N sequences of --data (0: all; a cache needs only their shards)")
    # Which regenerated rows train: the data mixes greedy (T=0) and sampled (T=1) answers row by row; the
    # T=0 / T=1 mix is a recipe choice measured on curves (validation always uses the same held-out rows).
    train_rows: str = option("all", "rows that train: all, greedy (T=0 answers) or sampled (T=1)", choices=ROW_KINDS)
    features: str | None = option(None, "target feature cache from `lilicorr data features` (default: online)")
    mask_token: str = option("", "DFlash mask token (default: <|mask|>, else <empty_output>)")
    device: str = option("auto", "auto: CUDA when available (NCCL under torchrun), else CPU", choices=DEVICES)
    # Comparison arms (dflash2 / dspark / domino) on a frozen --init backbone: only the arm trains, as
    # the LiLiCorr head does in mode 'head' — a cheap head-to-head on one shared backbone.
    freeze_backbone: bool = option(False, "comparison arms: train only the arm on the frozen --init backbone")

    @property
    def backbone_frozen(self) -> bool:
        return not get_mode(self.mode).trains_backbone(self.freeze_backbone)

    def validate(self) -> None:
        mode = get_mode(self.mode)
        if not 0.0 <= self.kd_weight <= 1.0:
            raise ValueError(f"--kd-weight {self.kd_weight}: expected a weight in [0, 1]")
        if self.freeze_backbone and not mode.freezable:
            raise ValueError(f"--freeze-backbone is for the comparison arms (mode {self.mode!r}; use --mode head)")
        if self.val_features and not self.val_data:
            raise ValueError("--val-features is the cache of --val-data: pass --val-data too")
        if self.train_vocab and mode.arm is not None:
            raise ValueError(f"--train-vocab is for dflash / lilicorr / head (mode {self.mode!r} reads full logits)")
        if self.train_vocab_negatives and not self.train_vocab:
            raise ValueError("--train-vocab-negatives samples the rest of a training vocabulary: pass --train-vocab")
        if not 0.0 < self.decay_ratio <= 1.0:
            raise ValueError(f"--decay-ratio {self.decay_ratio}: expected a share in (0, 1]")
        if self.stop_at < 0:
            raise ValueError(f"--stop-at {self.stop_at}: expected a step ≥ 0 (0: train to --steps)")
        if self.backbone_frozen and not self.init:
            raise ValueError(f"mode {self.mode!r} on a frozen backbone needs that backbone: pass --init DRAFT_DIR")


def progress(step: int, elapsed_s: float, cfg: DraftTrainConfig) -> float:
    """How far the run is, 0 → 1: by steps, or by wall time where ``max_minutes`` is the budget and comes first."""
    frac = step / max(1, cfg.steps)
    return max(frac, elapsed_s / (60 * cfg.max_minutes)) if cfg.max_minutes else frac


def _decayed(frac: float, cfg: DraftTrainConfig) -> float:
    """The LR factor after warm-up at ``frac`` (0 → 1) of the plan: cosine to 0, or constant then linear to 0."""
    if cfg.lr_schedule == "wsd":
        start = 1 - cfg.decay_ratio
        return 1.0 if frac < start else max(0.0, (1 - frac) / cfg.decay_ratio)
    prog = min(1.0, (frac - cfg.warmup_ratio) / max(1e-9, 1 - cfg.warmup_ratio))
    return 0.5 * (1 + math.cos(math.pi * prog))


def lr_at(step: int, cfg: DraftTrainConfig, elapsed_s: float = 0.0) -> float:
    """Linear warm-up over `warmup_ratio` of the run, then cosine to zero (or ``wsd``: constant, then a linear
    decay over the last ``decay_ratio``); the run is measured in steps, or in minutes under a time budget
    (``max_minutes``), so runs compared at equal wall time all finish their decay."""
    if cfg.max_minutes:
        frac = progress(step, elapsed_s, cfg)
        if frac < cfg.warmup_ratio:
            return cfg.lr * max(frac / cfg.warmup_ratio, 1 / max(1, round(cfg.warmup_ratio * cfg.steps)))
        return cfg.lr * _decayed(frac, cfg)
    warm = max(1, round(cfg.warmup_ratio * cfg.steps))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    if cfg.lr_schedule == "wsd":
        return cfg.lr * _decayed(step / max(1, cfg.steps), cfg)
    prog = min(1.0, (step - warm) / max(1, cfg.steps - warm))
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * prog))


# Targets without a mask token (most chat models): a rarely used special token of their own
# vocabulary serves as DFlash's mask, since the vocabulary (shared LM head) must not change.
# SmolLM2: '<empty_output>' (id 16), one of its unused code-dataset markers.
# Gemma: its own '<mask>' (id 4), never produced by the model.
MASK_TOKEN_FALLBACKS = ("<|mask|>", "<empty_output>", "<mask>")


def mask_token_id(tokenizer, name: str = "") -> int:
    """Id of the DFlash mask token: ``name`` if given, else the first of ``MASK_TOKEN_FALLBACKS`` present."""
    vocab = tokenizer.get_vocab()
    for tok in [name] if name else MASK_TOKEN_FALLBACKS:
        if tok in vocab:
            return int(vocab[tok])
    raise ValueError(
        f"tokenizer has no mask token ({name or ' or '.join(MASK_TOKEN_FALLBACKS)}); "
        "pass --mask-token with a rarely used special token of the target's vocabulary"
    )


# LiLiCorrGeometry field -> the training option that sets it
HEAD_OPTIONS = {"candidate_topk": "candidate_topk", "hidden_size": "head_hidden_size", "num_layers": "head_layers",
                "num_heads": "head_heads", "mlp_ratio": "head_mlp_ratio", "factor_dim": "factor_dim",
                "vector_eps": "vector_eps", "logit_scale": "logit_scale"}  # fmt: skip


def _first(tc, names: tuple[str, ...]):
    return next((getattr(tc, f) for f in names if getattr(tc, f, None) is not None), None)


def _rope_theta(tc) -> float:
    """The target's RoPE base: ``rope_theta``, or its ``rope_parameters`` — per layer type for Gemma 3, whose
    global layers' base (1e6) is taken: a drafter attends to the whole context, as those layers do."""
    rope = getattr(tc, "rope_theta", None)
    params = getattr(tc, "rope_parameters", None) or {}
    if rope is None and "rope_theta" in params:
        rope = params["rope_theta"]
    if rope is None and isinstance(params.get("full_attention"), dict):
        rope = params["full_attention"].get("rope_theta")
    return float(rope or 10000.0)


def target_geometry(tc) -> dict:
    """The drafter's shape from the target's config, with the fallbacks LayerNorm families need (GPT-NeoX:
    ``layer_norm_eps`` and no ``num_key_value_heads``; StarCoder2: ``norm_epsilon``): the drafter is its own
    RMSNorm architecture, so only the width, heads and an epsilon of the same order are borrowed."""
    heads = tc.num_attention_heads
    eps = _first(tc, ("rms_norm_eps", "layer_norm_eps", "norm_epsilon", "layer_norm_epsilon"))
    return {
        "hidden_size": tc.hidden_size,
        "intermediate_size": _first(tc, ("intermediate_size", "n_inner")) or 4 * tc.hidden_size,
        "num_attention_heads": heads,
        "num_key_value_heads": _first(tc, ("num_key_value_heads",)) or heads,
        "head_dim": getattr(tc, "head_dim", None) or tc.hidden_size // heads,
        "rms_norm_eps": float(eps if eps is not None else 1e-6),
        "rope_theta": _rope_theta(tc),
        "max_position_embeddings": _first(tc, ("max_position_embeddings", "n_positions")) or 8192,
    }


def build_draft_config(cfg: DraftTrainConfig, target: TargetRuntime) -> DraftConfig:
    tc = target.model.config.get_text_config(decoder=True)
    n = tc.num_hidden_layers
    layer_ids = cfg.target_layer_ids or default_layer_ids_for(n)
    try:
        mask_id = mask_token_id(target.tokenizer, cfg.mask_token)
    except ValueError as e:
        raise ValueError(f"target {target.path}: {e}") from e
    geometry = None
    if get_mode(cfg.mode).head:
        geometry = LiLiCorrGeometry(**{field: getattr(cfg, option) for field, option in HEAD_OPTIONS.items()})
    return DraftConfig(
        **target_geometry(tc),
        num_hidden_layers=cfg.num_layers,
        vocab_size=tc.vocab_size,
        block_size=cfg.block_size,
        mask_token_id=int(mask_id),
        target_layer_ids=layer_ids,
        num_target_layers=n,
        conv_kernel_size=cfg.conv_kernel_size,
        conv_group_size=cfg.conv_group_size,
        lilicorr=geometry,
    )


# where families keep their decoder layers and final norm (Llama-likes; Gemma 3 multimodal; GPT-NeoX; GPT-2-likes)
LAYER_PREFIXES = ("model.", "model.language_model.", "gpt_neox.", "transformer.", "")
FINAL_NORMS = ("norm", "final_layer_norm", "ln_f")


def _norm_scale(module: torch.nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """The per-channel scale a target norm applies, as a plain RMSNorm's weight. Gemma stores ``scale − 1`` (its
    norm multiplies by ``1 + weight``): an RMS-type norm is probed on a vector of ones (RMS 1: the output is its
    scale) and its weight, or ``1 + weight``, taken exactly when that is what it applies. A LayerNorm (it has a
    bias, and centres a ones vector to zero) scales by its weight."""
    if getattr(module, "bias", None) is not None or isinstance(module, torch.nn.LayerNorm):
        return weight
    with torch.no_grad():
        probe = module(torch.ones(1, weight.shape[0], dtype=weight.dtype))[0]
    for scale in (weight, 1 + weight):
        if torch.allclose(probe, scale, rtol=1e-3, atol=1e-5):
            return scale
    return probe


def copy_target_layers(model: DraftModel, target: TargetRuntime) -> list[str]:
    """Start the draft layers as the target's last ``num_layers`` decoder layers and the final norm as the
    target's: the drafter's output then begins in the LM head's own scale and basis, not a random one.
    Draft tensors without a counterpart of the same name and shape (the fusion ``fc``, q/k norms of a Llama
    target, GPT-NeoX's fused QKV) keep their init; norm weights are copied as the scale they apply. Returns
    the names copied."""
    tm = target.model
    src = tm.state_dict()
    n_t, n_d = target.num_layers, len(model.layers)
    prefix, final = next(
        ((p, f) for p in LAYER_PREFIXES for f in FINAL_NORMS if f"{p}{f}.weight" in src), ("model.", "norm")
    )
    blocks = "h." if any(k.startswith(f"{prefix}h.0.") for k in src) else "layers."
    copied = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("layers."):
                j, rest = name.split(".", 2)[1:]
                key = f"{prefix}{blocks}{n_t - n_d + int(j)}.{rest}"
            elif name == "norm.weight":
                key = f"{prefix}{final}.weight"
            else:
                continue
            if key not in src or src[key].shape != p.shape:
                continue
            value = src[key]
            if name.endswith("norm.weight"):
                value = _norm_scale(tm.get_submodule(key.removesuffix(".weight")), value)
            p.copy_(value.to(p.dtype))
            copied.append(name)
    return copied


def build_model(cfg: DraftTrainConfig, target: TargetRuntime) -> DraftModel:
    dcfg = build_draft_config(cfg, target)
    model = DraftModel(dcfg).init_weights(cfg.seed)
    if cfg.init_from_target:
        copy_target_layers(model, target)
    if cfg.init:
        init = load_draft(cfg.init, target.model.config)
        if init.cfg.target_layer_ids != dcfg.target_layer_ids or init.cfg.block_size != dcfg.block_size:
            dcfg.target_layer_ids, dcfg.block_size = init.cfg.target_layer_ids, init.cfg.block_size
            model = DraftModel(dcfg).init_weights(cfg.seed)
        missing = model.load_state_dict(init.state_dict(), strict=False)
        bad = [k for k in missing.missing_keys if not k.startswith("lilicorr.")]
        if bad or missing.unexpected_keys:
            raise ValueError(
                f"--init {cfg.init}: backbone mismatch (missing {bad[:4]}, unexpected {missing.unexpected_keys[:4]})"
            )
    return model
