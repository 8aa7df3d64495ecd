"""``MODEL_CARD.md`` for a trained drafter, written from its training summary and a bench run."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.cards.campaign_section import campaign_section
from lilicorr.cards.decoding_section import decoding_section
from lilicorr.data.atomic import atomic_write_text


def train_command(tc: dict) -> str:
    """The ``lilicorr train draft`` command that reproduces a run, rebuilt from its recorded config by the
    same field table that declares the options (``lilicorr/options.py``)."""
    from lilicorr.options import command_line
    from lilicorr.training.draft_config import DraftTrainConfig

    tc = {**tc, "run_dir": "", "device": "auto"}  # where and on what it ran: not part of the recipe
    return command_line("lilicorr train draft", DraftTrainConfig, tc)


def _data_command(dc: dict) -> str:
    """The ``lilicorr data regenerate`` command recorded in a data file's provenance."""
    from lilicorr.datagen.regenerate import RegenConfig
    from lilicorr.options import command_line

    return command_line("lilicorr data regenerate", RegenConfig, {**dc, "threads": 2, "device": "cpu"})


def _data_rows(tc: dict, meta: dict) -> list[str]:
    """The card's data rows: a regenerated file (its command), or a merged one (``lilicorr data merge``:
    its inputs, each with its own data card or command); the rows trained on when ``--max-sequences``."""
    used = (
        f"first {tc['max_sequences']} of {meta['sequences']} rows (the first {tc.get('val_sequences', 64)} held out)"
        if tc.get("max_sequences")
        else f"{meta['sequences']} rows"
    )
    if "inputs" not in meta:
        return [
            f"| data | `{tc['data']}`: {used} × {meta['length']} tokens ({meta['sampled_sequences']} continued at "
            f"T=1, the rest greedily), sha256[:16] `{meta['sha256_16']}` |",
            f"| data command | `{_data_command(meta['config'])}` |",
        ]
    parts = []
    for item in meta["inputs"]:
        own = Path(f"{item['input']}.json")
        card = json.loads(own.read_text()).get("config", {}).get("card") if own.exists() else None
        parts.append(f"`{item['input']}` ({item['rows']} rows{f', card `{card}/DATA_CARD.md`' if card else ''})")
    rows = meta.get("rows", "all")
    merge = " ".join(
        ["lilicorr data merge", *(i["input"] for i in meta["inputs"]), *(["--rows", rows] if rows != "all" else []),
         "--out", tc["data"]]
    )  # fmt: skip
    kept = f"the {rows} rows (of {meta['rows_of_inputs']}), " if rows != "all" else ""
    return [
        f"| data | `{tc['data']}`: {used} × {meta['length']} tokens, {meta.get('answer_tokens', '?')} answer tokens "
        f"in the whole file, sha256[:16] `{meta['sha256_16']}` |",
        f"| data command | `{merge}`, {kept}rows in order from {', '.join(parts)} |",
        *(
            [f"| validation data | the first {tc.get('val_sequences', 64)} rows of `{tc['val_data']}` |"]
            if tc.get("val_data")
            else []
        ),
    ]


def _curve_rows(run_dir: str | None) -> list[str]:
    """The held-out learning curve of the run (its ``train.log``), when the run folder is here."""
    from lilicorr.training.curves import read_curve

    if not run_dir or not (Path(run_dir) / "train.log").exists():
        return []
    pts = read_curve(run_dir)
    if not pts:
        return []
    walk = any(p.get("walk_tau") is not None for p in pts)
    rows = []
    for i in sorted({round(k * (len(pts) - 1) / 8) for k in range(9)}):  # nine points, first and last included
        p = pts[i]
        pos = f"{p['positions'] / 1e6:.2f}" if p.get("positions") else "—"
        acc = f"{p['slot1_acc']:.3f}" if p.get("slot1_acc") is not None else "—"
        same = f"{p['neighbour_same']:.3f}" if p.get("neighbour_same") is not None else "—"
        head = f" {p['walk_tau']:.3f} |" if walk else ""
        rows.append(f"| {p['step']} | {pos} | {p['minutes']:.1f} | {p['tau']:.3f} |{head} {acc} | {same} |")
    return [
        "",
        f"Learning curve (held-out validation during training; run folder `{run_dir}`, plotted by "
        f"`lilicorr report --curves {run_dir} --out PNG`):",
        "",
        "| step | positions (M) | minutes | τ estimate |"
        + (" τ estimate, head's walk |" if walk else "")
        + " slot-1 acc | neighbour same |",
        "|---|---|---|---|" + ("---|" if walk else "") + "---|---|",
        *rows,
    ]


def _arm_line(model_dir: Path) -> list[str]:
    """Comparison arms live in a sidecar (``arm.safetensors`` + ``arm.json``) that only our engine reads."""
    if not (model_dir / "arm.json").exists():
        return []
    arm = json.loads((model_dir / "arm.json").read_text())
    return [
        f"- comparison arm `{arm['kind']}` in `arm.safetensors` / `arm.json` "
        f"({', '.join(f'{k} {v}' for k, v in arm.items() if k != 'kind')}); read by `lilicorr` only — vLLM and "
        "SGLang load this folder as the plain DFlash backbone"
    ]


def moved_config(config: dict, model_dir: Path) -> dict:
    """The training config as if it had written to ``model_dir``: drafters are trained into a scratch root (e.g.
    ``runs/v3``) and moved into ``models/`` together once they win, so an ``--init`` backbone under the same
    scratch root moved with them (``runs/v3/smollm2-dflash`` → ``models/smollm2-dflash``); any other path stays."""
    old_out, new_out = Path(config["out"]).parts, Path(model_dir).parts
    k = 0  # trailing path parts the two share (the folder's name, and e.g. ``arms/``)
    while k < min(len(old_out), len(new_out)) and old_out[-1 - k] == new_out[-1 - k]:
        k += 1
    old_root, new_root = Path(*old_out[: len(old_out) - k] or ["."]), Path(*new_out[: len(new_out) - k] or ["."])
    out = {**config, "out": str(model_dir)}
    init = config.get("init")
    if k and init and old_root != new_root and Path(init).is_relative_to(old_root) and old_root != Path("."):
        out["init"] = str(new_root / Path(init).relative_to(old_root))
    return out


def _schedule(tc: dict) -> str:
    """The LR schedule in words (``lr_schedule``: cosine unless a run recorded wsd)."""
    if tc.get("lr_schedule", "cosine") == "wsd":
        return f"constant after warm-up, the last {tc.get('decay_ratio', 0):.1%} of steps linear to 0 (wsd)"
    return "cosine"


def _threads(summary: dict, tc: dict) -> str:
    """The run's threads; a run resumed with another thread count names each stretch by its first step."""
    stretches: list[dict] = []
    for seg in summary.get("segments") or []:
        if not stretches or stretches[-1]["threads"] != seg["threads"]:
            stretches.append(seg)
    if len(stretches) > 1:
        return ", then ".join(f"{s['threads']} thread(s) from step {s['from_step']}" for s in stretches)
    return f"{summary.get('threads', tc['threads'])} thread(s)"


def write_draft_card(
    model_dir: Path, command: str | None, data_meta: Path, bench: Path | None = None, bench_command: str = ""
) -> None:
    """``command`` None: rebuilt from the training summary (``train_command``), writing to this folder."""
    summary = json.loads((model_dir / "training_summary.json").read_text())
    command = command or train_command(moved_config(summary["config"], model_dir))
    cfg = json.loads((model_dir / "config.json").read_text())
    meta = json.loads(Path(data_meta).read_text())
    tc = summary["config"]
    dfc = cfg["dflash_config"]
    v = summary["final_val"] or {}
    geometry = ", ".join(f"{k.removeprefix('lilicorr_')}={dfc[k]}" for k in dfc if k.startswith("lilicorr_"))
    lines = [
        f"# {model_dir.name}",
        "",
        card_intro(cfg, tc),
        "",
        "## Geometry",
        "",
        f"- backbone: {cfg['num_hidden_layers']} Qwen3 layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads × {cfg['head_dim']}, "
        f"MLP {cfg['intermediate_size']}",
        f"- block size {dfc['block_size']} ({dfc['block_size'] - 1} drafted tokens), mask token id "
        f"{dfc['mask_token_id']}, target layers {dfc['target_layer_ids']}"
        + (
            f"; DFlash2 grouped dynamic convolution: {dfc['conv_kernel_size']} taps, groups of "
            f"{dfc['conv_group_size']} channels"
            if dfc.get("conv_kernel_size")
            else ""
        ),
        f"- LiLiCorr head: {geometry}" if geometry else "- no LiLiCorr head (vanilla DFlash)",
        *_arm_line(model_dir),
        "",
        "## Training (measured)",
        "",
        "```",
        command,
        "```",
        "",
        "| item | value |",
        "|---|---|",
        f"| seed | {tc['seed']} |",
        *_data_rows(tc, meta),
        *(
            [f"| target features | cached once by `lilicorr data features` in `{tc['features']}` (bf16), shared |"]
            if tc.get("features")
            else []
        ),
        f"| steps × batch × anchors | {summary['steps']} × {tc['batch_size']} × {tc['anchors']}"
        + (f"; logits over a {tc['train_vocab']}-token training vocabulary" if tc.get("train_vocab") else "")
        + (
            f" + {tc['train_vocab_negatives']} sampled negatives a step (sampled softmax)"
            if tc.get("train_vocab_negatives")
            else ""
        )
        + " |",
        f"| optimiser | AdamW fp32 master weights, lr {tc['lr']}, warm-up {tc['warmup_ratio']}, {_schedule(tc)}, clip "
        f"{tc['grad_clip']} ({'backbone and head separately' if tc.get('clip_per_module') else 'one global norm'}), "
        f"{'bf16 autocast' if tc.get('bf16', True) else 'fp32'}; DFlash γ {tc['gamma']}"
        + (f", soft labels (the target's distribution) weight {tc['kd_weight']:g}" if tc.get("kd_weight") else "")
        + " |",
        f"| head loss weights | {tc['head_weights']}; head-loss gradient into the backbone × "
        f"{tc.get('head_grad_to_backbone', 1.0):g} |",
        f"| wall time | {summary['wall_time_s'] / 60:.1f} min, {_threads(summary, tc)}, "
        f"{summary['world']} process(es) |",
        "",
        "Validation (held-out regenerated sequences, random anchors):",
        "",
        "```",
        json.dumps(v, indent=1),
        "```",
        "",
        "`slot_acc`: per-slot top-1 accuracy; `top1_prefix`: mean accepted prefix of per-slot argmax drafts; "
        "`walk_prefix`: the same for the head's greedy walk; `oracle_prefix`: prefix while the truth is in the "
        "top-K lattice (upper bound for any walk); `in_lattice`: truth-in-lattice rate per slot.",
        *_curve_rows(tc.get("run_dir")),
        *campaign_section(model_dir),
    ]
    if bench is not None:
        lines += decoding_section(model_dir, bench, bench_command)
    lines += draft_vocab_section(model_dir)
    atomic_write_text(model_dir / "MODEL_CARD.md", "\n".join(lines) + "\n")


def card_intro(cfg: dict, tc: dict) -> str:
    """The card's first paragraph: what the drafter is, and where it loads (``cfg``: its config.json; ``tc``: its
    training config)."""
    untapped = VLLM_CANNOT_TAP.get(_target_architecture(tc["target"]))
    return (
        f"`{cfg['architectures'][0]}` drafter for `{tc['target']}`, trained by `lilicorr train draft --mode "
        f"{tc['mode']}`. Loads unchanged in vLLM (≥ 0.32) and SGLang (0.5.23): Scheme A tensor names, "
        "bf16 safetensors."
        + (f" {untapped}" if untapped else "")
        + (
            " Its DFlash2 convolution follows the reference config keys; `make compat` loads its tensors into "
            "vLLM's own `DFlashGroupedConv` and matches its outputs (`tests/compat/test_vllm_conv.py`), but does "
            "not serve it end to end (vLLM-CPU runs the LiLiCorr head only with the GPU model runner)."
            if cfg["dflash_config"].get("conv_kernel_size")
            else ""
        )
    )


# Target architectures whose drafters vLLM loads but cannot serve yet, and why (measured: `make compat`,
# tests/compat/test_vllm_serving.py::test_vllm_cannot_tap_gemma3_yet fails once vLLM adds the interface).
VLLM_CANNOT_TAP = {
    "Gemma3ForCausalLM": "vLLM 0.32 cannot serve it yet: its Gemma 3 model does not hand a drafter the target's "
    "intermediate hidden states (no `SupportsEagle3`), so vLLM refuses the pair at start-up; this project's "
    "engine, `lilicorr serve` and the checkpoint itself are unaffected.",
}


def _target_architecture(target: str) -> str | None:
    path = Path(target) / "config.json"
    try:
        return json.loads(path.read_text()).get("architectures", [None])[0] if path.exists() else None
    except (json.JSONDecodeError, IndexError, AttributeError):
        return None


def draft_vocab_section(model_dir: Path) -> list[str]:
    """The card's lines on the folder's ``draft_vocab.json`` (none without one): where its ids came from."""
    path = model_dir / "draft_vocab.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    src = d.get("source", {})
    return [
        "",
        "## Draft vocabulary",
        "",
        f"`draft_vocab.json`: the {len(d['token_ids'])} most frequent token ids (most frequent first) of "
        f"{', '.join(f'`{x}`' for x in src.get('data', []))} ({src.get('rows', '?')} rows, "
        f"{src.get('tokens_counted', '?')} tokens), written by `lilicorr data draft-vocab --target "
        f"{src.get('target', '?')} --data {' '.join(src.get('data', []))} --out {model_dir}`. With "
        "`draft_vocab_size: N` (speculative config; `--draft-vocab-size N`) the engine drafts through the LM "
        "head over the first N of them only — cheaper, still lossless. vLLM and SGLang ignore the file."
        + (
            f" Its `default_size` {d['default_size']}: the folder's default configuration (`--draft` alone, "
            "`make run`, a bare `serve`) drafts from that many unless another size is asked."
            if d.get("default_size")
            else ""
        ),
    ]
