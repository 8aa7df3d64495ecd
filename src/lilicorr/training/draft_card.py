"""``MODEL_CARD.md`` for a trained drafter, written from its training summary and a bench run."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text


def _bench_rows(bench: dict, name: str) -> list[str]:
    rows = []
    for r in bench["runs"]:
        base, at, n = r["arm"]["name"].partition("@")  # draft-length variants: ARM@nN
        if base == name or base.startswith(f"{name}:"):
            label = (base.split(":")[-1] if ":" in base else r["arm"]["method"]) + (
                f" ({n[1:]} draft tokens)" if at else ""
            )
            rows.append(
                f"| {r['temperature']:g} | {label} | {r['pooled']['tau']:.3f} | "
                f"{r['tau_mean_per_request']:.3f} | {r['speedup_vs_ar']:.2f}× | "
                f"{100 * r['head_walk_share']:.1f} % | {'yes' if r.get('identical_to_ar', True) else 'NO'} |"
            )
    return rows


def train_command(tc: dict) -> str:
    """The ``lilicorr train draft`` command that reproduces a run, rebuilt from its recorded config by the
    same field table that declares the options (``lilicorr/options.py``)."""
    from lilicorr.options import command_line
    from lilicorr.training.draft_config import DraftTrainConfig

    tc = {**tc, "run_dir": "", "device": "auto"}  # where and on what it ran: not part of the recipe
    return command_line("lilicorr train draft", DraftTrainConfig, tc)


def _data_command(dc: dict) -> str:
    """The ``lilicorr data regenerate`` command recorded in a data file's provenance."""
    from lilicorr.options import command_line
    from lilicorr.training.regenerate import RegenConfig

    return command_line("lilicorr data regenerate", RegenConfig, {**dc, "threads": 2, "device": "cpu"})


def _categories(bench: dict) -> str:
    counts: dict[str, int] = {}
    for r in bench["runs"][0].get("per_request", []):
        counts[str(r.get("category"))] = counts.get(str(r.get("category")), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


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


def write_draft_card(
    model_dir: Path, command: str | None, data_meta: Path, bench: Path | None = None, bench_command: str = ""
) -> None:
    """``command`` None: rebuilt from the training summary (``train_command``), writing to this folder."""
    summary = json.loads((model_dir / "training_summary.json").read_text())
    command = command or train_command({**summary["config"], "out": str(model_dir)})
    cfg = json.loads((model_dir / "config.json").read_text())
    meta = json.loads(Path(data_meta).read_text())
    tc = summary["config"]
    dfc = cfg["dflash_config"]
    v = summary["final_val"] or {}
    geometry = ", ".join(f"{k.removeprefix('lilicorr_')}={dfc[k]}" for k in dfc if k.startswith("lilicorr_"))
    lines = [
        f"# {model_dir.name}",
        "",
        f"`{cfg['architectures'][0]}` drafter for `{tc['target']}`, trained by `lilicorr train draft --mode "
        f"{tc['mode']}`. Loads unchanged in vLLM (≥ 0.32) and SGLang (0.5.23): Scheme A tensor names, "
        "bf16 safetensors."
        + (
            " Its DFlash2 convolution follows the reference config keys; serving it in vLLM is not part of "
            "`make compat`."
            if dfc.get("conv_kernel_size")
            else ""
        ),
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
        f"| data | `{tc['data']}`: {meta['sequences']} sequences × {meta['length']} tokens "
        f"({meta['sampled_sequences']} continued at T=1, the rest greedily), sha256[:16] `{meta['sha256_16']}` |",
        f"| data command | `{_data_command(meta['config'])}` |",
        *(
            [f"| target features | cached once by `lilicorr data features` in `{tc['features']}` (bf16), shared |"]
            if tc.get("features")
            else []
        ),
        f"| steps × batch × anchors | {summary['steps']} × {tc['batch_size']} × {tc['anchors']} |",
        f"| optimiser | AdamW fp32 master weights, lr {tc['lr']}, warm-up {tc['warmup_ratio']}, cosine, clip "
        f"{tc['grad_clip']} ({'backbone and head separately' if tc.get('clip_per_module') else 'one global norm'}), "
        f"{'bf16 autocast' if tc.get('bf16', True) else 'fp32'}; DFlash γ {tc['gamma']} |",
        f"| head loss weights | {tc['head_weights']}; head-loss gradient into the backbone × "
        f"{tc.get('head_grad_to_backbone', 1.0):g} |",
        f"| wall time | {summary['wall_time_s'] / 60:.1f} min, {summary.get('threads', tc['threads'])} thread(s), "
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
    ]
    if bench is not None:
        b = json.loads(Path(bench).read_text())
        rows = _bench_rows(b, model_dir.name)
        n_long = sum(x.get("category") == "long" for x in b["runs"][0].get("per_request", []))
        lines += [
            "",
            "## Decoding (measured with the engine)",
            "",
            f"`{bench_command}` — {b['runs'][0]['prompts']} prompts ({_categories(b)})"
            + (f" ({n_long} of them long-context)" if n_long else "")
            + ", "
            f"{b['max_tokens']} new tokens each, batch 1, {b['environment']['threads']} threads.",
            "",
            "| T | method | τ pooled | τ per request | speedup vs AR | head+walk share | T=0 identical to AR |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    atomic_write_text(model_dir / "MODEL_CARD.md", "\n".join(lines) + "\n")
