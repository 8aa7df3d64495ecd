"""``lilicorr train`` (tokenizer, target, drafter) and ``lilicorr card`` (their model cards)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _summary(summary: dict) -> int:
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    return 0


def _draft(args: argparse.Namespace) -> int:
    from lilicorr.options import from_args
    from lilicorr.training.draft import train_draft
    from lilicorr.training.draft_config import DraftTrainConfig

    return _summary(train_draft(from_args(DraftTrainConfig, args), resume=args.resume))


def _campaign(args: argparse.Namespace) -> int:
    from lilicorr.training.campaign_run import campaign_status, run_campaign

    try:
        camp = run_campaign(args.config, max_segments=args.max_segments)
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # a bad file, a second driver, a failed segment
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(campaign_status(camp.run_dir), indent=2))
    return 0


def _status(args: argparse.Namespace) -> int:
    from lilicorr.training.campaign_run import campaign_status

    try:
        status = campaign_status(args.run, goal=args.goal)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    state = ("paused" if status["paused"] else "running") if status["running"] else "not running"
    eta = f"{status['eta_hours']} h"
    if status["eta_partial"]:  # an arm without a pace adds nothing to the sum: say so rather than under-promise
        eta = f"≥ {eta} (an arm has not trained yet)" if status["eta_hours"] else "unknown until an arm has trained"
    print(f"campaign {status['campaign']} ({status['run_dir']}): {state}; plan ETA {eta}")
    for c in status["features"]:  # a fresh disk: the driver extracts these before its first segment
        if c["needed"] is None or c["shards"] < c["needed"]:
            left = f"; ≈ {c['hours_left']} h left at the last shards' pace" if c["hours_left"] is not None else ""
            doing = "extracting before training"
            if c["extracting"] not in (None, status["campaign"]):  # one extraction at a time
                doing = f"waiting for {c['extracting']}'s extraction, then extracting before training"
            print(f"  features {c['cache']}: {c['shards']}/{c['needed'] or '?'} shards ({doing}{left})")
    for a in status["arms"]:
        engine = ", ".join(f"{k} {v['tau']:.3f}" for k, v in (a["engine"] or {}).items()) or "-"
        walk = f" (walk {_tau(a['heldout_walk_tau'])})" if a["heldout_walk_tau"] is not None else ""
        print(
            f"  {a['arm']}: step {a['logged_step']}/{a['plan']} ({a['step']} checkpointed), "
            f"{a['positions'] or 0:,} positions validated, {a['hours']} h, "
            f"held-out tau {_tau(a['heldout_tau'])}{walk}, engine {engine}, "
            f"{a['hours_left']} h left, started {a['started']}"
        )
        if a["heading"]:
            print("    " + _heading(a["heading"]))
    return 0


def _heading(h: dict) -> str:
    """Where the arm's held-out tau is heading (``training.campaign_projection``), in one line."""
    line = (f"{h['tau']} heading: {h['per_doubling']:+.3f} per doubling of steps (log fit, {h['points']} points), "
            f"{h['per_1000_recent']:+.3f} per 1 000 steps lately")  # fmt: skip
    if h.get("goal") is None:
        return line
    reach = []
    for which, label in (("recent", "at the recent pace"), ("fit", "on the log fit")):
        step, hours = h.get(f"goal_step_{which}"), h.get(f"hours_to_goal_{which}")
        if not step:
            reach.append(f"never {label}")
            continue
        reach.append(f"step {step:,} {label}" + (f" ({hours} h of this arm's training)" if hours is not None else ""))
    return line + f"; {h['goal']:.3f} at " + ", ".join(reach)


def _tau(value: float | None) -> str:
    """Three decimals, as the curves print them; '-' before the first evaluation."""
    return "-" if value is None else f"{value:.3f}"


def _signal(args: argparse.Namespace) -> int:
    from lilicorr.training.campaign_run import signal_campaign

    try:
        pgid = signal_campaign(args.run, pause=args.train_cmd == "pause")
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'paused' if args.train_cmd == 'pause' else 'resumed'} process group {pgid}")
    return 0


def _promote(args: argparse.Namespace) -> int:
    from lilicorr.training.campaign import load_campaign
    from lilicorr.training.campaign_promote import compare_for_promotion, promote

    try:
        camp = load_campaign(args.config)
        arm, drafter, label = camp.arm(args.arm), None, ""
        if args.decay_steps:  # a decayed candidate from the constant-LR trunk (trained now, or resumed)
            from lilicorr.training.campaign_branch import start_branch
            from lilicorr.training.campaign_run import train_segment

            cfg = start_branch(camp, arm, args.decay_steps)
            train_segment(cfg, Path(cfg.run_dir) / "train.out", in_process=False)
            drafter, label = Path(cfg.out), Path(cfg.run_dir).name
        decision = compare_for_promotion(camp, arm, args.margin, args.num_prompts, drafter, label)
        print(json.dumps(decision, indent=2))
        with (camp.run_dir / "promote" / "decisions.jsonl").open("a") as log:
            log.write(json.dumps(decision) + "\n")
        if args.apply:
            print(f"promoted: {promote(camp, decision)} (now rewrite its card: lilicorr card draft)")
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # RuntimeError: a failed decay branch (its log named)
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _eval(args: argparse.Namespace) -> int:
    from lilicorr.data.atomic import atomic_write_text
    from lilicorr.training.evaluate import evaluate_draft

    missing = [p for p in (*args.draft, args.target, args.data) if not Path(p).exists()]
    if missing:  # before any (slow) evaluation
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    from lilicorr.runtime.runtime import TargetRuntime

    try:
        runtime = TargetRuntime.load(args.target)  # once for every drafter
    except (ValueError, OSError) as e:  # a folder that is not a causal LM: named, nothing written
        print(f"error: {args.target}: {e}", file=sys.stderr)
        return 2
    results = []
    for draft in args.draft:
        try:
            results.append(
                evaluate_draft(
                    draft,
                    args.target,
                    args.data,
                    args.features,
                    args.val_sequences,
                    args.batch_size,
                    args.threads,
                    runtime=runtime,
                )
            )
        except (ValueError, FileNotFoundError) as e:  # CheckpointError is a ValueError: names the file and field
            print(f"error: {draft}: {e}", file=sys.stderr)
            return 2
    text = json.dumps(results, indent=2) + "\n"
    if args.out:
        atomic_write_text(Path(args.out), text)
    print(text, end="")
    return 0


def _target(args: argparse.Namespace) -> int:
    from lilicorr.options import from_args
    from lilicorr.training.target import TargetTrainConfig, train_target

    return _summary(train_target(from_args(TargetTrainConfig, args), resume=args.resume))


def _tokenizer(args: argparse.Namespace) -> int:
    from lilicorr.data.corpus import read_split
    from lilicorr.data.tokenizer import save_tokenizer, special_ids, train_tokenizer

    docs = read_split(Path(args.corpus), "train")
    tok = train_tokenizer((d.text for d in docs), vocab_size=args.vocab_size)
    save_tokenizer(tok, Path(args.out), model_max_length=args.model_max_length)
    print(json.dumps({"vocab_size": tok.get_vocab_size(), "special_ids": special_ids(tok)}))
    return 0


def _card_target(args: argparse.Namespace) -> int:
    from lilicorr.cards.target import write_target_card

    write_target_card(Path(args.model), Path(args.corpus), command=args.command, threads=args.threads)
    print(f"wrote {Path(args.model) / 'MODEL_CARD.md'}")
    return 0


def _card_draft(args: argparse.Namespace) -> int:
    from lilicorr.cards.draft import write_draft_card

    bench = Path(args.bench) if args.bench else None
    write_draft_card(Path(args.model), args.command, Path(args.data_meta), bench, args.bench_command)
    print(f"wrote {Path(args.model) / 'MODEL_CARD.md'}")
    return 0


def _card_decoding(args: argparse.Namespace) -> int:
    from lilicorr.cards.decoding_section import replace_decoding_section

    missing = [str(p) for p in (Path(args.bench), *(Path(m) / "MODEL_CARD.md" for m in args.model)) if not p.exists()]
    if missing:  # checked before any card is written: all or nothing
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    for model in args.model:
        replace_decoding_section(Path(model), Path(args.bench), args.bench_command)
        print(f"updated the Decoding section of {Path(model) / 'MODEL_CARD.md'}")
    return 0


def register(sub) -> None:
    from lilicorr.options import add_options
    from lilicorr.training.draft_config import DraftTrainConfig
    from lilicorr.training.target import TargetTrainConfig

    train = sub.add_parser("train", help="train tokenizer, targets, drafters")
    train = train.add_subparsers(dest="train_cmd", required=True)
    s = train.add_parser("tokenizer", help="train the byte-level BPE tokenizer")
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--out", required=True)
    s.add_argument("--vocab-size", type=int, default=8192)
    s.add_argument("--model-max-length", type=int, default=8192)
    s.set_defaults(func=_tokenizer)

    for name, cls, func, help_ in (
        ("target", TargetTrainConfig, _target, "pre-train a small Qwen3 target on the corpus"),
        ("draft", DraftTrainConfig, _draft, "train a DFlash drafter, a LiLiCorr drafter, or a head on a backbone"),
    ):
        s = train.add_parser(name, help=help_)
        add_options(s, cls)
        s.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
        s.set_defaults(func=func)

    s = train.add_parser("campaign", help="train a campaign's arms for its planned steps, resuming where it stopped")
    s.add_argument("config", help="campaign TOML file (configs/campaign/)")
    s.add_argument("--max-segments", type=int, default=0, help="stop after N segments (0: run the plan out)")
    s.set_defaults(func=_campaign)
    s = train.add_parser("promote", help="compare a campaign arm with its shipped folder; --apply replaces it if ahead")
    s.add_argument("config", help="campaign TOML file")
    s.add_argument("arm", help="the arm (its [arms.NAME] table)")
    s.add_argument("--margin", type=float, default=0.03, help="required lead on held-out AND engine tau (0.03: 3 %%)")
    s.add_argument("--num-prompts", type=int, default=36, help="engine prompts (round-robin over the categories)")
    s.add_argument("--apply", action="store_true", help="replace the shipped folder when the decision says so")
    s.add_argument(
        "--decay-steps",
        type=int,
        default=0,
        help="first train a decay branch: the arm's checkpoint plus N steps with the LR decayed to 0 "
        "(the trunk is untouched); compare that instead of the constant-LR weights",
    )
    s.set_defaults(func=_promote)
    s = train.add_parser("status", help="a campaign's steps, positions, hours, held-out and engine tau, ETA")
    s.add_argument("run", help="campaign TOML file or its run folder")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--goal",
        type=float,
        default=None,
        help="a held-out tau: the steps and hours each arm's curve needs to reach it",
    )
    s.set_defaults(func=_status)
    for name, help_ in (("pause", "SIGSTOP a running campaign (before timing)"), ("resume", "SIGCONT it")):
        s = train.add_parser(name, help=help_)
        s.add_argument("run", help="campaign TOML file or its run folder")
        s.set_defaults(func=_signal)

    s = train.add_parser("eval", help="held-out metrics of drafters, as training validates (same rows and blocks)")
    s.add_argument("draft", nargs="+", help="drafter folders, each evaluated on the same blocks")
    s.add_argument("--target", required=True)
    s.add_argument("--data", required=True, help="file made by `lilicorr data regenerate`: its first rows are held out")
    s.add_argument("--features", default=None, help="feature cache of --data (default: run the target online)")
    s.add_argument("--val-sequences", type=int, default=64, help="held-out rows (training's --val-sequences)")
    s.add_argument("--batch-size", type=int, default=8)
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: the default)")
    s.add_argument("--out", default=None, help="also write the results (a JSON list) here")
    s.set_defaults(func=_eval)

    card = sub.add_parser("card", help="write model cards").add_subparsers(dest="card_cmd", required=True)
    s = card.add_parser("target", help="evaluate a target and write its MODEL_CARD.md")
    s.add_argument("model")
    s.add_argument("--corpus", default="data/corpus")
    s.add_argument("--command", required=True, help="the exact training command, recorded in the card")
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=_card_target)

    s = card.add_parser("draft", help="write a drafter's MODEL_CARD.md from its summary and a bench run")
    s.add_argument("model")
    s.add_argument("--command", default=None, help="training command to record (default: rebuilt from its config)")
    s.add_argument("--data-meta", required=True, help="the .json written beside the regenerated data")
    s.add_argument("--bench", default=None, help="results.json of a `lilicorr bench` run including this drafter")
    s.add_argument("--bench-command", default="")
    s.set_defaults(func=_card_draft)

    s = card.add_parser("decoding", help="rewrite only the Decoding section of drafters' cards from a bench run")
    s.add_argument("model", nargs="+")
    s.add_argument("--bench", required=True, help="results.json of a `lilicorr bench` run including these drafters")
    s.add_argument("--bench-command", required=True, help="the command that made it, recorded in the cards")
    s.set_defaults(func=_card_decoding)
