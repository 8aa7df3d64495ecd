"""llama.cpp beside lilicorr's engine on the same chat prompts, batch 1, T = 0: tokens/s and acceptance.

Arms: llama-server AR (the target GGUF, Q4_1 as shipped), llama-server's own model-free speculation
(``--spec-type ngram-simple``, the baseline a drafter must beat there), llama-server (patched by ``make
llamacpp``) + each drafter exported as GGUF — DFlash, the LiLiCorr drafters with their head and as their DFlash
backbone alone (the head's effect), the dflash2 arm as llama.cpp's DFlash2, and reduced draft vocabularies
(``--draft-vocab N``) — and lilicorr's engine (AR, ngram, the LiLiCorr chain, the DFlash chain of the same
backbone, DDTree, and the default: what ``generate --draft`` runs) on the dequantized HF folder. Writes a
markdown table (default docs/results/smollm2-llamacpp.md). Run it alone on the machine: timings.

    python benchmarks/llamacpp_speed.py --threads 2 --max-tokens 64

The LiLiCorr head's share of a llama-server drafting cycle (issue #46: head + walk ≤ 10 % of a cycle) is measured
side by side — the drafter with its head and as its backbone alone, served at once, each prompt sent to both in
alternating order — and written as its own section; alone (a few minutes, the rest of the page kept):

    python benchmarks/llamacpp_speed.py --head-share-only --threads 2 --max-tokens 64 --rounds 2
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

from lilicorr.cli.openmp import openmp_spin

# the engine arms' OpenMP wait as `lilicorr bench` chooses it, before torch loads (llama-server gets llama.cpp's own
# defaults from LlamaServer whatever this process has)
openmp_spin("bench")

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import torch

from lilicorr.bench.llamacpp import Answer, LlamaServer, chat, pooled
from lilicorr.bench.runner import environment
from lilicorr.checkpoint import load_draft
from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.chat import row_ids
from lilicorr.data.prompt_sets import load_set
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig, default_config, parse_speculative_config
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.export.gguf import export_gguf
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.machine import bf16_label
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.shipped import SHIPPED_DFLASH, SHIPPED_DRAFT, SHIPPED_TARGET

CONV_DRAFT = "models/smollm2-lilicorr-conv"
DFLASH2_ARM = "models/arms/smollm2-dflash2"
DRAFT_VOCABS = (8192, 16384, 32768)


def gguf_arms(out_dir: Path) -> list[tuple[str, Path]]:
    """(label, GGUF) per llama.cpp drafter arm, exported in process (``lilicorr export --format gguf``)."""
    plan: list[tuple[str, str, dict]] = [
        ("DFlash", SHIPPED_DFLASH, {}),
        ("LiLiCorr backbone alone (DFlash drafting)", SHIPPED_DRAFT, {"backbone_only": True}),
        ("LiLiCorr (head + greedy walk)", SHIPPED_DRAFT, {}),
        ("LiLiCorr-conv backbone alone", CONV_DRAFT, {"backbone_only": True}),
        ("LiLiCorr-conv (head + greedy walk)", CONV_DRAFT, {}),
        ("dflash2 arm (llama.cpp DFlash2 selector)", DFLASH2_ARM, {}),
    ]
    for drafter in (SHIPPED_DFLASH, SHIPPED_DRAFT):
        listed = Path(drafter, "draft_vocab.json")
        n_ids = len(json.loads(listed.read_text())["token_ids"]) if listed.exists() else 0
        label = "DFlash" if drafter == SHIPPED_DFLASH else "LiLiCorr (head + greedy walk)"
        plan += [
            (f"{label}, draft vocab {n // 1024}k", drafter, {"draft_vocab": n}) for n in DRAFT_VOCABS if n <= n_ids
        ]
    arms = []
    for label, drafter, kw in plan:
        if not Path(drafter, "config.json").exists():
            print(f"skipping {label}: {drafter} missing", flush=True)
            continue
        suffix = "-".join(f"{k}{v}" for k, v in kw.items() if v is not True) or ("backbone" if kw else "full")
        out = out_dir / f"{Path(drafter).name}-{suffix}.gguf"
        info = export_gguf(drafter, SHIPPED_TARGET, out, **kw)
        arms.append((f"llama.cpp + {Path(drafter).name}: {label} [{info['layout']}]", out))
    return arms


IDENTITY_NOTE = (
    "Identity on llama.cpp: its greedy text on the Q4_1 target depends on batch shapes — past 256 tokens of "
    "context a one-token step's attention splits the keys between the threads and merges the partial softmaxes, "
    "while a multi-token verify batch takes them in one pass — so any speculation can flip a near-tie. "
    "`tests/llamacpp/test_near_tie.py` replays both through llama-server's own libllama: the answers that differ "
    "swap two tokens whose logits lie within 0.16 of each other, and the token kept is the target's own argmax in "
    "the verify batch "
    "([deploy guide](../guide/deploy-llamacpp.md#why-a-drafter-can-change-llama-servers-greedy-text)). "
    "On other prompts 4 of 8 answers with our GGUF drafter differed early from plain decoding, and llama-server's "
    "own `--spec-type ngram-simple` produced the very same 4 answers. `make llamacpp-check` therefore accepts an "
    "answer equal to plain decoding or to llama.cpp's own speculation."
)


# llama-server's speculative statistics (printed at trace level, `-lv 4`, after every request; cumulative): calls of
# the drafter's draft() and the time spent inside them (dur g, ms) — the drafter's graph and, with a LiLiCorr head,
# the head and the walk; without one, the host's greedy read of the slots' logits.
STATS = re.compile(
    r"statistics\s+draft-dflash: #calls\(b,g,a\) =\s*\d+\s+(\d+)\s+\d+.*dur\(b,g,a\) = [\d.]+, ([\d.]+),"
)
HEAD_SHARE_TITLE = "## The LiLiCorr head's share of a drafting cycle"


def _cycles(a: Answer) -> int:
    """Target verify steps of one answer: each emits its accepted drafts plus one token; the first token comes
    from the prompt's evaluation (outside predicted_ms)."""
    return a.predicted_n - 1 - a.draft_n_accepted


def head_share(prompts: list[dict], threads: int, max_tokens: int, rounds: int, out_dir: Path) -> dict:
    """The LiLiCorr drafter in llama-server with its head (+ greedy walk) and as its DFlash backbone alone,
    measured side by side: both servers run at once (idle between requests), every prompt goes to one and then
    the other, the order alternating, so a background load weighs on both alike. Per arm: target cycles, ms per
    cycle (predicted_ms over cycles), ms per draft call (llama-server's own `dur g`), τ; `head_share_rows` turns
    them into the head's share of a cycle: (draft call with head − without) / cycle with head, and beside it the
    whole cycle's difference."""
    ggufs = {
        "head": out_dir / f"{Path(SHIPPED_DRAFT).name}-full.gguf",
        "backbone": out_dir / f"{Path(SHIPPED_DRAFT).name}-backbone.gguf",
    }
    for arm, path in ggufs.items():
        info = export_gguf(SHIPPED_DRAFT, SHIPPED_TARGET, path, backbone_only=arm == "backbone")
        print(f"head share: {arm} arm {path} [{info['layout']}]", flush=True)
    logs = {arm: Path(f"runs/llamacpp-head-share-{arm}.log") for arm in ggufs}
    servers = {arm: LlamaServer(SHIPPED_TARGET + ".gguf", ggufs[arm], threads=threads, log=logs[arm]) for arm in ggufs}
    for server in servers.values():
        server.cmd += ["-lv", "4"]  # trace level: the speculative statistics after each request
    answers: dict[str, list[list[Answer]]] = {arm: [[] for _ in range(rounds)] for arm in ggufs}
    load = [os.getloadavg()[0]]
    with servers["head"], servers["backbone"]:
        for r in range(rounds):
            for i, row in enumerate(prompts):
                order = ("head", "backbone") if (i + r) % 2 == 0 else ("backbone", "head")
                for arm in order:
                    answers[arm][r].append(chat(servers[arm], row, max_tokens))
            print(f"head share: round {r + 1}/{rounds} done", flush=True)
    load.append(os.getloadavg()[0])
    out: dict = {"rounds": rounds, "prompts": len(prompts), "load_avg": load, "arms": {}}
    for arm in ggufs:
        stats = [(int(c), float(ms)) for c, ms in STATS.findall(logs[arm].read_text(errors="replace"))]
        assert len(stats) == rounds * len(prompts), f"{logs[arm]}: {len(stats)} statistics lines (run with -lv 4)"
        per_round = []
        for r in range(rounds):
            before = stats[r * len(prompts) - 1] if r else (0, 0.0)
            after = stats[(r + 1) * len(prompts) - 1]
            rows = answers[arm][r]
            ms = sum(a.predicted_n / a.predicted_per_second * 1000 for a in rows if a.predicted_per_second > 0)
            per_round.append(
                {
                    "cycles": sum(_cycles(a) for a in rows),
                    "ms": ms,
                    "draft_calls": after[0] - before[0],
                    "draft_ms": after[1] - before[1],
                    "tokens": sum(a.predicted_n for a in rows),
                    "accepted": sum(a.draft_n_accepted for a in rows),
                }
            )
        out["arms"][arm] = per_round
    return out


def head_share_rows(res: dict) -> tuple[list[dict], list[str]]:
    """Per round and over all rounds: per arm ms per cycle and per draft call; the head's share."""
    rows = []
    for r in [*range(res["rounds"]), None]:
        row: dict = {"round": "all" if r is None else r + 1}
        for arm, per_round in res["arms"].items():
            picked = per_round if r is None else [per_round[r]]
            tot = {k: sum(p[k] for p in picked) for k in picked[0]}
            row[arm] = {
                "cycles": tot["cycles"],
                "cycle_ms": tot["ms"] / tot["cycles"],
                "draft_ms": tot["draft_ms"] / tot["draft_calls"],
                "tau": tot["tokens"] / (tot["tokens"] - tot["accepted"]),  # as pooled(): tokens per target step
            }
        h, b = row["head"], row["backbone"]
        row["head_share"] = (h["draft_ms"] - b["draft_ms"]) / h["cycle_ms"]
        row["cycle_share"] = (h["cycle_ms"] - b["cycle_ms"]) / h["cycle_ms"]
        rows.append(row)
    lines = [
        "| round | arm | cycles | ms / cycle | ms / draft call | draft call / cycle | τ | head's share of the cycle |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for arm, label in (("head", "LiLiCorr (head + walk)"), ("backbone", "its backbone alone")):
            a = row[arm]
            share = f"**{row['head_share']:.1%}** (whole cycle: {row['cycle_share']:+.1%})" if arm == "head" else ""
            lines.append(
                f"| {row['round']} | {label} | {a['cycles']} | {a['cycle_ms']:.2f} | {a['draft_ms']:.2f} | "
                f"{a['draft_ms'] / a['cycle_ms']:.1%} | {a['tau']:.3f} | {share} |"
            )
    return rows, lines


def head_share_section(res: dict, command: str, env: str) -> list[str]:
    rows, table = head_share_rows(res)
    share = rows[-1]["head_share"]
    load = res["load_avg"]
    return [
        HEAD_SHARE_TITLE,
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} ({env}; 1-minute load average "
        f"{load[0]:.2f} before, {load[1]:.2f} after); {res['prompts']} prompts, chosen as for the table above, "
        f"{res['rounds']} round(s). `{Path(SHIPPED_DRAFT).name}` exported twice — with its head and "
        "`--backbone-only` — and served by two llama-servers at once; every prompt goes to one and then the other, "
        "the order alternating, so both see the same machine load (the ratio is the measurement, not the "
        "milliseconds). A cycle is one target verify step: predicted_ms over (tokens − 1 − accepted drafts). "
        "The draft call is llama-server's own timing of the drafter's `draft()` (`-lv 4`, `dur(b,g,a)`: g): one "
        "decode of the drafter's block and the read of its result — with the head, the backbone, the head's part of "
        "the graph and the greedy walk over the lattice; without it, the backbone, the top-10 that llama.cpp's "
        "backend sampling runs in the graph, and the host's pick per slot. The head's share = (draft call with the "
        "head − without) / cycle with the head: what the head and its walk add to a cycle. The whole cycle's "
        "difference beside it also holds the target's verify step and the drafter's feature injection, which "
        "differ only through what was accepted, and the noise of two separate servers.",
        "",
        *table,
        "",
        f"The head pays for itself in llama-server when it lifts τ by more than it lengthens the cycle: ×"
        f"{rows[-1]['head']['cycle_ms'] / rows[-1]['backbone']['cycle_ms']:.3f} needed, ×"
        f"{rows[-1]['head']['tau'] / rows[-1]['backbone']['tau']:.3f} measured here.",
        "",
        f"Issue goal (head + walk ≤ 10 % of a llama-server drafting cycle): "
        f"{'met' if share <= 0.10 else 'not met'} ({share:.1%} over all rounds).",
    ]


def splice_section(page: Path, section: list[str]) -> None:
    """Replace (or add, before ## Notes) the head-share section of an existing page."""
    text = page.read_text().rstrip("\n").split("\n")
    if HEAD_SHARE_TITLE in text:
        start = text.index(HEAD_SHARE_TITLE)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = [*section, ""] if end < len(text) else section
    else:
        at = text.index("## Notes") if "## Notes" in text else len(text)
        text[at:at] = [*section, ""]
    atomic_write_text(page, "\n".join(text) + "\n")


def splice_notes(page: Path, notes: Path) -> None:
    """Replace the page's ``## Notes`` section (the last one) by the notes file as it is now: notes are written
    after a run, and rerunning every arm to include them would change the figures they describe."""
    text = page.read_text()
    head = text.split("\n## Notes\n", 1)[0].rstrip("\n")
    atomic_write_text(page, head + "\n\n## Notes\n\n" + notes.read_text().rstrip() + "\n")


def engine_arm(target, spec: SpecConfig, draft, draft_dir, prompts, max_tokens) -> dict:
    engine = build_engine(target, spec, draft, draft_dir)
    eos = frozenset(target.eos_token_ids)
    tokens, secs, outs = 0, 0.0, []
    for row in prompts:
        req = Request(row_ids(target.tokenizer, row), SamplingParams(max_tokens=max_tokens), eos_ids=eos)
        t0 = time.perf_counter()
        engine.generate([req])
        secs += time.perf_counter() - t0
        tokens += len(req.output_ids)
        outs.append(req.output_ids)
    return {"tokens": tokens, "tokens_per_s": round(tokens / secs, 2), "tau": round(engine.stats.tau, 4), "outs": outs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=16, help="MT-Bench prompts, one per category first")
    ap.add_argument("--code", type=int, default=8, help="HumanEval prompts, spread over the set")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rounds", type=int, default=1, help="head share: passes over the prompts")
    ap.add_argument("--machine-note", default="", help="head share: what else ran on the machine, for the page")
    ap.add_argument("--notes-only", action="store_true", help="rewrite only the Notes section of --out from --notes")
    ap.add_argument(
        "--head-share-only",
        action="store_true",
        help="measure only the LiLiCorr head's share of a llama-server drafting cycle; rewrite that section of --out",
    )
    ap.add_argument("--out", default="docs/results/smollm2-llamacpp.md")
    ap.add_argument(
        "--notes",
        default="docs/results/smollm2-llamacpp-notes.md",
        help="written by hand, included under Notes if present",
    )
    args = ap.parse_args()
    if args.notes_only:
        splice_notes(Path(args.out), Path(args.notes))
        print(json.dumps({"written": args.out}))
        return 0
    torch.set_num_threads(args.threads)
    rows = load_set("mt-bench")
    prompts = (rows[::10] + [r for i, r in enumerate(rows) if i % 10])[: args.prompts]
    code = load_set("humaneval")
    prompts += code[:: max(1, len(code) // max(1, args.code))][: args.code]
    gguf = Path("build/gguf")
    gguf.mkdir(parents=True, exist_ok=True)
    machine = environment()
    llama_env = (
        f"`lilicorr env`: {machine['cpu']}, {machine['cores']} cores, {bf16_label()}; llama-server -t {args.threads} "
        "with llama.cpp's default OpenMP wait" + (f"; {args.machine_note}" if args.machine_note else "")
    )
    command = "python benchmarks/llamacpp_speed.py " + shlex.join(sys.argv[1:])
    if args.head_share_only:
        res = head_share(prompts, args.threads, args.max_tokens, args.rounds, gguf)
        section = head_share_section(res, command, llama_env)
        print("\n".join(section), flush=True)
        print(json.dumps({"head_share": head_share_rows(res)[0]}))
        splice_section(Path(args.out), section)
        print(json.dumps({"written": args.out}))
        return 0
    table = []
    llama_ar = None
    arms: list[tuple[str, Path | None, str | None]] = [("llama.cpp AR", None, None)]
    arms += [("llama.cpp ngram-simple", None, "ngram-simple")]
    arms += [(label, path, None) for label, path in gguf_arms(gguf)]
    for name, draft, spec_type in arms:
        with LlamaServer(SHIPPED_TARGET + ".gguf", draft, threads=args.threads, spec_type=spec_type) as server:
            answers = [chat(server, r, args.max_tokens) for r in prompts]
        stats = pooled(answers)
        texts = [a.text for a in answers]
        llama_ar = llama_ar or texts
        table.append(
            (
                name,
                stats["tokens_per_s"],
                stats["tau"],
                f"{sum(a == b for a, b in zip(texts, llama_ar, strict=True))}/{len(texts)}",
            )
        )
        print(table[-1], flush=True)
    share = head_share(prompts, args.threads, args.max_tokens, args.rounds, gguf)
    share_rows, _ = head_share_rows(share)
    print(
        ("head share", round(share_rows[-1]["head_share"], 4), "whole cycle", round(share_rows[-1]["cycle_share"], 4))
    )
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(SHIPPED_TARGET, dtype=dtype)
    lili = load_draft(SHIPPED_DRAFT, target.model.config, dtype=dtype)
    ar = engine_arm(target, SpecConfig(method="ar"), None, None, prompts, args.max_tokens)
    engine_arms = [
        ("lilicorr engine AR", ar),
        (
            "lilicorr engine ngram",
            engine_arm(
                target, SpecConfig(method="ngram", num_speculative_tokens=4), None, None, prompts, args.max_tokens
            ),
        ),
        (
            "lilicorr engine LiLiCorr chain",
            engine_arm(target, SpecConfig(), lili, SHIPPED_DRAFT, prompts, args.max_tokens),
        ),
        (
            "lilicorr engine DFlash chain (LiLiCorr backbone)",
            engine_arm(target, SpecConfig(method="dflash"), lili, SHIPPED_DRAFT, prompts, args.max_tokens),
        ),
        (
            "lilicorr engine DDTree (LiLiCorr backbone, 16 nodes)",
            engine_arm(target, SpecConfig(method="ddtree"), lili, SHIPPED_DRAFT, prompts, args.max_tokens),
        ),
        (
            "lilicorr engine default (`generate --draft`: LiLiCorr tree + prompt lookup, draft gate)",
            engine_arm(
                target,
                parse_speculative_config(default_config(SHIPPED_DRAFT)),
                lili,
                SHIPPED_DRAFT,
                prompts,
                args.max_tokens,
            ),
        ),
    ]
    for name, r in engine_arms:
        same = sum(a == b for a, b in zip(r["outs"], ar["outs"], strict=True))
        table.append((name, r["tokens_per_s"], r["tau"], f"{same}/{len(prompts)}"))
        print(table[-1], flush=True)
    base = table[0][1]
    cpu = environment()["cpu"]
    spin = os.environ.get("GOMP_SPINCOUNT")
    env = f"{cpu}, {args.threads} threads, {bf16_label()}, engine dtype {dtype}" + (
        f" and GOMP_SPINCOUNT={spin} (as `lilicorr bench` chooses it)" if spin is not None else ""
    )
    env += "; llama-server with llama.cpp's default OpenMP wait (not our PASSIVE)"
    lines = [
        "# llama.cpp beside lilicorr (SmolLM2-135M-Instruct, batch 1, T = 0)",
        "",
        f"Generated by `python benchmarks/llamacpp_speed.py --threads {args.threads} --max-tokens {args.max_tokens}` "
        f"on {time.strftime('%Y-%m-%d')} ({env}); {args.prompts} MT-Bench prompts (one per category first) and "
        f"{len(prompts) - args.prompts} HumanEval prompts, "
        f"{args.max_tokens}-token answers. llama.cpp runs the shipped Q4_1 GGUF; the engine runs the folder "
        "dequantized from it. τ = tokens per target step; 'identical' compares with the AR arm of the same stack.",
        "",
        "| arm | tokens/s | × llama.cpp AR | τ | identical to its AR |",
        "|---|---|---|---|---|",
    ]
    for name, tps, tau, same in table:
        lines.append(f"| {name} | {tps:.1f} | {tps / base:.2f}× | {tau if tau else '—'} | {same} |")
    lines += ["", IDENTITY_NOTE, "", *head_share_section(share, command, llama_env)]
    if Path(args.notes).exists():
        lines += ["", "## Notes", "", Path(args.notes).read_text().rstrip()]
    atomic_write_text(Path(args.out), "\n".join(lines) + "\n")
    print(json.dumps({"written": args.out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
