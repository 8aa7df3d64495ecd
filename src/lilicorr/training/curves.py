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
    neighbour-same rate, slot-1 accuracy."""
    log = Path(run_dir) / "train.log"
    if not log.exists():
        raise FileNotFoundError(f"{log}: not found (a run folder of `lilicorr train draft` has one)")
    points = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if "val" not in rec:
            continue
        val = rec["val"]
        points.append(
            {
                "step": rec["step"],
                "positions": rec.get("positions"),
                "minutes": rec["elapsed_s"] / 60,
                "tau": val["tau_top1_estimate"],
                "neighbour_same": val.get("neighbour_same"),
                "slot1_acc": val["slot_acc"][0] if val.get("slot_acc") else None,
            }
        )
    return points


def plot_curves(runs: list[str | Path], out: str | Path) -> Path:
    """One PNG: τ estimate vs supervised positions (left) and vs minutes (right), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_pos, ax_min) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in runs:
        pts = read_curve(run)
        name = Path(run).name
        with_pos = [p for p in pts if p["positions"] is not None]
        if with_pos:
            ax_pos.plot([p["positions"] for p in with_pos], [p["tau"] for p in with_pos], marker="o", label=name)
        ax_min.plot([p["minutes"] for p in pts], [p["tau"] for p in pts], marker="o", label=name)
    for ax, xlabel in ((ax_pos, "supervised positions"), (ax_min, "minutes of training")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out τ estimate (1 + top-1 prefix)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
