"""Learning curves of drafter training runs (``lilicorr report --curves RUN…``): the held-out top-1-prefix
τ estimate against supervised positions and against minutes, several runs in one PNG, so recipe
choices are compared at equal data and at equal wall time.

A run's ``train.log`` (JSON lines, written by ``train draft``) holds, at each validation, the step's
``positions`` (supervised positions so far), ``elapsed_s`` and ``val`` (``tau_top1_estimate``,
``slot_acc``, ``neighbour_same``, losses).
"""

from __future__ import annotations

import json
from pathlib import Path


def read_curve(run_dir: str | Path) -> list[dict]:
    """The validation points of a run: positions (None in logs from before it was recorded), minutes, τ estimate,
    neighbour-same rate, slot-1 accuracy.

    A run cut and resumed (``--resume``) retrains from its last checkpoint, so its log holds the cut run's points
    past that checkpoint and then the resumed run's for the same steps: a point at a step not past the previous
    one drops the earlier points from that step on (the training they measured was discarded)."""
    log = Path(run_dir) / "train.log"
    if not log.exists():
        raise FileNotFoundError(f"{log}: not found (a run folder of `lilicorr train draft` has one)")
    points = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if "val" not in rec:
            continue
        val = rec["val"]
        points = [p for p in points if p["step"] < rec["step"]]  # a resumed run's retrained steps replace the cut's
        points.append(
            {
                "step": rec["step"],
                "positions": rec.get("positions"),
                "minutes": rec["elapsed_s"] / 60,
                "tau": val["tau_top1_estimate"],
                "neighbour_same": val.get("neighbour_same"),
                "slot1_acc": val["slot_acc"][0] if val.get("slot_acc") else None,
                "walk_tau": 1 + val["walk_prefix"] if val.get("walk_prefix") is not None else None,  # LiLiCorr
                # per kind of held-out row (logs from before the split have neither): T=0 decoding is judged on
                # the greedy rows, sampling on the T=1 ones
                "tau_greedy": val.get("greedy", {}).get("tau_top1_estimate"),
                "tau_sampled": val.get("sampled", {}).get("tau_top1_estimate"),
                # T = 1 drafting (sampled from the drafter, rejection-verified), judged on the sampled rows
                "tau_t1_sampled": val.get("sampled", {}).get("tau_t1_estimate"),
                # a head trained on a frozen backbone leaves the top-1 τ flat: its curve is the walk's
                "walk_tau_greedy": (
                    1 + val["greedy"]["walk_prefix"] if val.get("greedy", {}).get("walk_prefix") is not None else None
                ),
            }
        )
    return points


def _start_configs(run_dir: str | Path) -> list[dict]:
    """The config of every start of a run (its ``train.log``'s ``start`` events: one more per resume)."""
    lines = (Path(run_dir) / "train.log").read_text().splitlines()
    return [rec["config"] for rec in map(json.loads, lines) if rec.get("event") == "start"]


def run_config(run_dir: str | Path) -> dict:
    """The config a run started with (the first start on a resumed run)."""
    starts = _start_configs(run_dir)
    return starts[0] if starts else {}


def run_threads(run_dir: str | Path) -> str:
    """Threads per training process; a run resumed with another count shows each in order (``1→2``), since its
    minutes mix both."""
    counts: list[str] = []
    for cfg in _start_configs(run_dir):
        t = str(cfg.get("threads") or "all")
        if not counts or counts[-1] != t:
            counts.append(t)
    return "→".join(counts) or "all"


def _interpolate(points: list[dict], x: float, key: str = "tau", along: str = "minutes") -> float | None:
    """``key`` (a τ estimate) where ``along`` (minutes or supervised positions) equals ``x``, linear between the
    validations around it; None past the run's last point or where a point lacks either value."""
    prev = None
    for p in points:
        if p[along] is None or p[key] is None:
            continue
        if p[along] >= x:
            if prev is None or p[along] == prev[along]:
                return p[key]
            w = (x - prev[along]) / (p[along] - prev[along])
            return prev[key] + w * (p[key] - prev[key])
        prev = p
    return None


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def curves_table(runs: list[str | Path]) -> str:
    """A markdown table of the runs: recipe, budget, supervised positions (and per second), and held-out
    τ estimate at the end and at the shortest run's minutes (equal wall time); the τ that decides T = 0 decoding
    (the greedy rows' where validation splits them) at equal wall time, and at the fewest supervised positions any
    run reached (equal data: the data and recipe questions read both); for runs with a LiLiCorr head,
    also its walk's τ estimate (all rows at equal time, and the greedy rows at the end); where validation measured
    it, the T = 1 estimate on the sampled rows (``block_metrics``' ``t1_prefix``)."""
    curves = {Path(r).name: read_curve(r) for r in runs}
    common = min((c[-1]["minutes"] for c in curves.values() if c), default=0.0)
    split = any(p["tau_greedy"] is not None for c in curves.values() for p in c)
    decide = "tau_greedy" if split else "tau"  # the τ T = 0 decoding is judged by
    reached = [c[-1]["positions"] for c in curves.values() if c and c[-1]["positions"]]
    equal_pos = min(reached, default=None)
    walks = any(p["walk_tau"] is not None for c in curves.values() for p in c)
    t1 = any(p["tau_t1_sampled"] is not None for c in curves.values() for p in c)
    head = ("| run | data | layers | anchors | train vocab | threads | steps | minutes | positions (M) | positions/s "
            f"| τ est. at {common:.1f} min | final τ est. | greedy / sampled rows "
            + (f"| greedy τ at {common:.1f} min " if split else "")
            + (f"| {'greedy ' if split else ''}τ at {equal_pos / 1e6:.2f} M positions " if equal_pos else "")
            + (f"| walk τ at {common:.1f} min | final walk τ, greedy rows " if walks else "")
            + ("| T=1 τ est., sampled rows " if t1 else "")
            + "| slot-1 acc | neighbour same |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for run in runs:
        name, pts, cfg = Path(run).name, curves[Path(run).name], run_config(run)
        if not pts:
            continue
        last = pts[-1]
        pos = last["positions"] or 0
        rate = pos / (last["minutes"] * 60) if last["minutes"] else 0.0
        eq = _interpolate(pts, common)
        extra = f"| {_fmt(_interpolate(pts, common, decide))} " if split else ""  # T = 0's τ at equal time
        if equal_pos:
            extra += f"| {_fmt(_interpolate(pts, equal_pos, decide, along='positions'))} "  # and at equal data
        kinds = "—" if last["tau_greedy"] is None else f"{last['tau_greedy']:.4f} / {last['tau_sampled']:.4f}"
        if walks:  # the optional columns: the head's walk, the T = 1 estimate
            eq_walk = _interpolate(pts, common, "walk_tau") if last["walk_tau"] is not None else None
            extra += f"| {_fmt(eq_walk)} | {_fmt(last['walk_tau_greedy'])} "
        if t1:
            extra += f"| {_fmt(last['tau_t1_sampled'])} "
        lines.append(
            f"| {name} | {Path(cfg.get('data', '?')).stem} | {cfg.get('num_layers')} | {cfg.get('anchors')} "
            f"| {cfg.get('train_vocab') or 'all'} | {run_threads(run)} | {last['step']} "
            f"| {last['minutes']:.1f} | {pos / 1e6:.2f} | {rate:.0f} | {eq:.4f} | {last['tau']:.4f} | {kinds} "
            f"{extra}| {last['slot1_acc']:.4f} | {last['neighbour_same']} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(runs: list[str | Path], out: str | Path) -> Path:
    """One PNG: τ estimate vs supervised positions (left) and vs minutes (middle), one line per run, and where
    the runs validated per kind of row, the greedy rows' τ estimate vs minutes (right). A run with a LiLiCorr head
    adds its walk's τ estimate as a dashed line of the same colour (vs minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {Path(run).name: read_curve(run) for run in runs}
    split = any(p["tau_greedy"] is not None for pts in curves.values() for p in pts)
    fig, axes = plt.subplots(1, 3 if split else 2, figsize=(16.5 if split else 11, 4.2))
    for name, pts in curves.items():
        with_pos = [p for p in pts if p["positions"] is not None]
        if with_pos:
            axes[0].plot([p["positions"] for p in with_pos], [p["tau"] for p in with_pos], marker="o", label=name)
        (line,) = axes[1].plot([p["minutes"] for p in pts], [p["tau"] for p in pts], marker="o", label=name)
        walk = [p for p in pts if p["walk_tau"] is not None]
        if walk:
            axes[1].plot([p["minutes"] for p in walk], [p["walk_tau"] for p in walk], ls="--", marker=".",
                         color=line.get_color(), label=f"{name} (walk)")  # fmt: skip
        greedy = [p for p in pts if p["tau_greedy"] is not None]
        if split and greedy:  # T=0 decoding is judged on these rows
            axes[2].plot([p["minutes"] for p in greedy], [p["tau_greedy"] for p in greedy], marker="o", label=name,
                         color=line.get_color())  # fmt: skip
            gwalk = [p for p in greedy if p["walk_tau_greedy"] is not None]
            if gwalk:
                axes[2].plot([p["minutes"] for p in gwalk], [p["walk_tau_greedy"] for p in gwalk], ls="--",
                             marker=".", color=line.get_color(), label=f"{name} (walk)")  # fmt: skip
    labels = [("supervised positions", "held-out τ estimate (1 + top-1 prefix)"),
              ("minutes of training", "held-out τ estimate (1 + top-1 prefix)"),
              ("minutes of training", "τ estimate, greedy (T=0) held-out rows")]  # fmt: skip
    for ax, (xlabel, ylabel) in zip(axes, labels, strict=False):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
