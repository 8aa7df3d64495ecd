"""Resumable-run bookkeeping shared by every trainer: checkpoint, log, progress, wall clock.

A checkpoint holds the model, the optimiser, the data RNG and the counters, written atomically
every few minutes, so ``--resume`` continues bit for bit and a crash loses at most those minutes.
It also holds the run's configuration: ``--resume`` into a run folder that holds *another* run (a new
drafter on another backbone, say, in the folder of a finished one with the same shapes) is refused with
the options that differ, instead of silently continuing — or instantly "finishing" — the old run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

from lilicorr.data.atomic import atomic_write

# Options that may change between a run and its resumption: where things are written, how often it checkpoints or
# validates, the threads, the device and its precision (bf16 autocast or fp32: a campaign moves between machines
# with and without native bf16; master weights and optimiser state are fp32 either way), and the length and where
# its decay starts (a cut run resumed with more steps or minutes, a campaign's segment resumed with a later
# ``stop_at``, a decay branch forked from a campaign's constant-LR trunk). Everything else changes what is
# trained and must match.
RESUMABLE_CHANGES = frozenset(
    {
        "out",
        "run_dir",
        "checkpoint_minutes",
        "val_every",
        "threads",
        "device",
        "bf16",
        "features",
        "val_features",
        "steps",
        "decay_ratio",
        "max_minutes",
        "stop_at",
    }
)


# A run's data may grow: a file whose first rows are exactly the checkpoint's (``data_extends``), e.g. a merge of
# the old file and newly regenerated rows — the held-out first rows stay the same, the rest is more to learn from.
DATA_KEYS = frozenset({"data", "max_sequences"})


def data_extends(saved: dict, current: dict) -> str | None:
    """A note when ``current``'s data is the checkpoint's data extended (its first rows are the checkpoint's rows,
    token for token and mask for mask, and it may use more of them), else None."""
    if all(saved.get(k) == current.get(k) for k in DATA_KEYS) or not saved.get("data") or not current.get("data"):
        return None
    from lilicorr.datagen.regenerate import load_regenerated

    try:
        old, new = load_regenerated(saved["data"]), load_regenerated(current["data"])
    except (OSError, ValueError, KeyError):
        return None  # the old file is gone or unreadable: nothing proves an extension
    n_old = min(int(saved.get("max_sequences") or 1 << 62), old["tokens"].shape[0])
    n_new = min(int(current.get("max_sequences") or 1 << 62), new["tokens"].shape[0])
    if n_new < n_old or old["tokens"].shape[1] != new["tokens"].shape[1]:
        return None
    for key in ("tokens", "loss_mask"):
        if not torch.equal(old[key][:n_old], new[key][:n_old]):
            return None
    return f"data extended: {saved['data']} ({n_old} rows) -> {current['data']} ({n_new} rows), same first rows"


def config_mismatch(saved: dict, current: dict, data_grew: bool = False) -> list[str]:
    """The options (besides ``RESUMABLE_CHANGES``, and the data when ``data_extends`` found it only grew) whose
    values differ between a checkpoint's run and this one."""
    keys = sorted((saved.keys() | current.keys()) - RESUMABLE_CHANGES - (DATA_KEYS if data_grew else set()))
    return [
        f"{k}: checkpoint {saved.get(k)!r}, this run {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)
    ]


class TrainRun:
    def __init__(
        self,
        run_dir: Path,
        model: torch.nn.Module,
        opt: torch.optim.Optimizer,
        gen: torch.Generator,
        total_steps: int,
        desc: str,
        checkpoint_minutes: float,
        resume: bool,
        is_main: bool = True,
        log_every: int = 10,
        extra_state: dict | None = None,
        config: dict | None = None,
    ):
        self.run_dir, self.model, self.opt, self.gen = Path(run_dir), model, opt, gen
        self.total_steps, self.checkpoint_minutes, self.is_main, self.log_every = (
            total_steps,
            checkpoint_minutes,
            is_main,
            log_every,
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "checkpoint.pt"
        self.state: dict = {"step": 0, "elapsed_s": 0.0, "history": [], **(extra_state or {})}
        self.config = config  # saved with every checkpoint; checked on resume (checkpoints from before: not checked)
        if resume and self.path.exists():
            ck = torch.load(self.path, weights_only=False)
            if config is not None and ck.get("config") is not None:
                grown = data_extends(ck["config"], config)  # reads both data files: once
                diff = config_mismatch(ck["config"], config, data_grew=grown is not None)
                if diff:
                    raise ValueError(
                        f"{self.path}: --resume would continue another run (step {ck['state']['step']}): "
                        + "; ".join(diff)
                        + ". Pass another --run-dir, or drop --resume to start this run from scratch there."
                    )
                if grown:
                    tqdm.write(grown)
                    ck["state"].setdefault("data_changes", []).append({"step": ck["state"]["step"], "note": grown})
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])
            gen.set_state(ck["gen"])
            self.state = ck["state"]
            tqdm.write(f"resumed from step {self.state['step']}")
        # Threads may change on resume (RESUMABLE_CHANGES): each segment's count is kept, so that a summary of a
        # resumed run does not report the last segment's threads for its whole wall time.
        self.state.setdefault("segments", []).append(
            {"from_step": self.state["step"], "threads": torch.get_num_threads()}
        )
        self.log = (self.run_dir / "train.log").open("a") if is_main else None
        self.t0 = time.time() - self.state["elapsed_s"]
        self.last_ckpt = time.time()
        self._last_step_end, self._step_s = time.time(), None  # pause detection (``_discount_pause``)
        self.bar = tqdm(total=total_steps, initial=self.state["step"], desc=desc, mininterval=5, disable=not is_main)

    @property
    def step(self) -> int:
        return self.state["step"]

    @property
    def done(self) -> bool:
        return self.state["step"] >= self.total_steps

    def event(self, record: dict) -> None:
        if self.log:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()

    def finish_step(self, record: dict, validate=None, val_every: int = 0) -> dict:
        """Count the step, validate when due (``validate()`` → dict), log, checkpoint when due."""
        self.state["step"] += 1
        self._discount_pause()
        self.state["elapsed_s"] = time.time() - self.t0
        record = {"step": self.state["step"], **record, "elapsed_s": round(self.state["elapsed_s"], 1)}
        self.bar.update(1)
        if "loss" in record:
            self.bar.set_postfix(loss=f"{record['loss']:.3f}", refresh=False)
        if (
            validate is not None
            and self.is_main
            and val_every
            and (self.step % val_every == 0 or self.step == self.total_steps)
        ):
            t_val = time.time()
            record["val"] = validate()
            self.t0 += time.time() - t_val  # validation is not training time: curves compare training minutes
            self.state["history"].append(record)
            tqdm.write(json.dumps(record))
        if self.step % self.log_every == 0 or "val" in record:
            self.event(record)
        if time.time() - self.last_ckpt > self.checkpoint_minutes * 60:
            self.save()
        self._last_step_end = time.time()  # validation and checkpoints are not a step's time (nor a pause)
        return record

    def _discount_pause(self) -> None:
        """A step that took far longer than the ones before it was stopped (SIGSTOP while a benchmark timed
        something, a suspended machine): its excess is not training time, so the curves' minutes axis and a time
        budget count only what trained. Threshold: 60 s and 20× the running step time."""
        gap = time.time() - self._last_step_end  # this step's forward, backward and update (not the bookkeeping)
        if self._step_s is not None and gap > max(60.0, 20 * self._step_s):
            self.t0 += gap - self._step_s
            self.event({"event": "pause", "step": self.state["step"], "seconds": round(gap - self._step_s, 1)})
            gap = self._step_s
        self._step_s = gap if self._step_s is None else 0.9 * self._step_s + 0.1 * gap

    def save(self) -> None:
        if self.is_main:
            payload = {
                "model": self.model.state_dict(),
                "opt": self.opt.state_dict(),
                "gen": self.gen.get_state(),
                "state": self.state,
                "config": self.config,
            }
            atomic_write(self.path, lambda p: torch.save(payload, p))
        self.last_ckpt = time.time()

    def close(self) -> None:
        self.bar.close()
        self.save()

    @property
    def last_val(self) -> dict | None:
        return self.state["history"][-1]["val"] if self.state["history"] else None
