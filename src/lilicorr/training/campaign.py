"""A training campaign: drafters trained for a planned budget of many hours, accumulated across sessions.

One TOML file (``configs/campaign/*.toml``) names the arms (DFlash, LiLiCorr, …), the options they share
(``[train]``: every ``lilicorr train draft`` option, by its field name) and the plan: ``steps`` per arm, over
which the LR schedule runs (``lr_schedule = "wsd"``: constant, then a linear decay at the end), trained in
segments of ``segment_steps``, arm after arm, so that at every moment the arms have had the same steps —
the comparison stays fair wherever the campaign is cut. Each segment is an ordinary ``train draft --resume``
process with ``--stop-at``: the run folder's checkpoint is the campaign's only state, so a cut (session end,
SIGKILL) loses at most the steps since that arm's last checkpoint, and the same command resumes.

A machine that lost its disk has no checkpoint: the arm then starts from ``warm_start`` (the shipped drafter
folder, whose card says how it was trained) and the campaign log says so. This module reads the plan; the
driver and its status are in ``campaign_run.py``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lilicorr.runtime.dtype import cpu_has_fast_bf16
from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.losses import HeadLossWeights

# keys of an ``[arms.NAME]`` table that belong to the campaign, not to ``train draft``
ARM_KEYS = ("warm_start", "promote_to", "engine_methods")
TOP_KEYS = ("name", "run_dir", "steps", "segment_steps", "threads", "train", "arms", "engine", "data")
DATA_KEYS = ("packs", "prompts", "merges")  # [data]: what (re)builds the data files (campaign_data.py)
ENGINE_KEYS = ("prompts", "num_prompts", "max_new_tokens", "every", "dtype")
# set by the campaign for every segment: a config file that sets them would be silently overridden
MANAGED = ("steps", "stop_at", "run_dir", "out", "init", "threads")


@dataclass
class EngineSample:
    """A fixed engine benchmark (``lilicorr bench``, T = 0) of each arm's current weights every ``every`` steps:
    the held-out blocks measure training, this measures what decoding gets, per prompt category."""

    prompts: str
    num_prompts: int = 18
    max_new_tokens: int = 32
    every: int = 4000
    dtype: str = "auto"


@dataclass
class Arm:
    name: str
    options: dict  # ``train draft`` options of this arm (DraftTrainConfig field names)
    warm_start: str | None = None  # a drafter folder to start from when the arm has no checkpoint
    promote_to: str | None = None  # the shipped folder a checkpoint of this arm may replace
    engine_methods: list[str] = field(default_factory=lambda: [""])  # bench arm suffixes: "", ":top1", …


@dataclass
class Campaign:
    source: Path
    name: str
    run_dir: Path
    steps: int  # planned optimiser steps per arm
    segment_steps: int
    threads: int
    train: dict
    arms: list[Arm]
    engine: EngineSample | None
    packs: list[str] = field(default_factory=list)  # answer packs rebuilding the data files (``[data] packs``)
    prompts: dict[str, list[str]] = field(default_factory=dict)  # prompt file -> the sets it joins (``[data] prompts``)
    merges: dict[str, list[str]] = field(default_factory=dict)  # merged data file -> its inputs (``[data] merges``)

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(f"{self.source}: no arm {name!r} (arms: {', '.join(a.name for a in self.arms)})")

    def arm_run_dir(self, arm: Arm) -> Path:
        return self.run_dir / "runs" / arm.name

    def arm_out(self, arm: Arm) -> Path:
        """The arm's current weights as a drafter folder, rewritten at the end of every segment."""
        return self.run_dir / "drafters" / arm.name


TRAIN_FIELDS = {f.name for f in dataclasses.fields(DraftTrainConfig)} - {"head_weights"}
HEAD_WEIGHT_FIELDS = {f.name for f in dataclasses.fields(HeadLossWeights)}


def _unknown(where: str, keys, allowed) -> None:
    bad = sorted(set(keys) - set(allowed))
    if bad:
        raise ValueError(f"{where}: unknown key(s) {', '.join(bad)} (expected some of: {', '.join(sorted(allowed))})")


def _train_options(where: str, table: dict) -> dict:
    """``train draft`` options of one table, checked by name; head-loss weights by their field names too."""
    _unknown(where, table, TRAIN_FIELDS | HEAD_WEIGHT_FIELDS)
    managed = sorted(set(table) & set(MANAGED))
    if managed:
        raise ValueError(f"{where}: {', '.join(managed)} set by the campaign itself (plan: top-level steps)")
    return dict(table)


def _prompt_files(where: str, table: object) -> dict[str, list[str]]:
    """``{file: [set, …]}``: each file is the named prompt sets (``lilicorr data prompts``) one after another; a
    set named ``SET:raw`` gives its rows as raw text (a base model's evaluation prompts, ``write_raw_prompts``)."""
    from lilicorr.data.prompt_sets import SETS

    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table of file = [set, …], found {type(table).__name__}")
    out = {}
    for file, sets in table.items():
        known = isinstance(sets, list) and all(isinstance(n, str) and n.removesuffix(":raw") in SETS for n in sets)
        if not known or not sets:
            raise ValueError(f"{where}: {file} = {sets!r}: expected a list of prompt sets from {SETS} (or SET:raw)")
        out[str(file)] = list(sets)
    return out


def _merges(where: str, table: object) -> dict[str, list[str]]:
    """``{out: [input, …]}``: each merged data file and the data files (or shard folders) it is made of, in order."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table of file = [input, …], found {type(table).__name__}")
    out = {}
    for file, inputs in table.items():
        if not isinstance(inputs, list) or len(inputs) < 2 or not all(isinstance(i, str) for i in inputs):
            raise ValueError(f"{where}: {file} = {inputs!r}: expected a list of at least two data files")
        out[str(file)] = list(inputs)
    return out


def load_campaign(path: str | Path) -> Campaign:
    """The campaign of a TOML file, every key checked: a typo is named with its file and table, not ignored."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no campaign file there")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    _unknown(str(path), raw, TOP_KEYS)
    for key in ("name", "run_dir", "steps", "arms"):
        if key not in raw:
            raise ValueError(f"{path}: missing top-level key {key!r}")
    steps, seg = int(raw["steps"]), int(raw.get("segment_steps", 500))
    if steps < 1 or seg < 1:
        raise ValueError(f"{path}: steps {steps} and segment_steps {seg} must be ≥ 1")
    train = _train_options(f"{path} [train]", raw.get("train", {}))
    arms = []
    for name, table in raw["arms"].items():
        where = f"{path} [arms.{name}]"
        if not isinstance(table, dict):
            raise ValueError(f"{where}: expected a table of options")
        own = {k: v for k, v in table.items() if k not in ARM_KEYS}
        arm = Arm(name, _train_options(where, own), **{k: table[k] for k in ARM_KEYS if k in table})
        if "mode" not in {**train, **arm.options}:
            raise ValueError(f"{where}: no mode (dflash, lilicorr, …) for this arm nor in [train]")
        arms.append(arm)
    if not arms:
        raise ValueError(f"{path}: no [arms.NAME] table: nothing to train")
    engine = None
    if "engine" in raw:
        _unknown(f"{path} [engine]", raw["engine"], ENGINE_KEYS)
        engine = EngineSample(**raw["engine"])
    data = raw.get("data", {})
    _unknown(f"{path} [data]", data, DATA_KEYS)
    packs = [str(p) for p in data.get("packs", [])]
    for pack in packs:
        if not Path(pack).is_file():
            raise FileNotFoundError(f"{path} [data] packs: {pack} not found")
    prompts = _prompt_files(f"{path} [data] prompts", data.get("prompts", {}))
    merges = _merges(f"{path} [data] merges", data.get("merges", {}))
    camp = Campaign(
        path,
        raw["name"],
        Path(raw["run_dir"]),
        steps,
        seg,
        int(raw.get("threads", 0)),
        train,
        arms,
        engine,
        packs,
        prompts,
        merges,
    )
    for arm in arms:  # every arm's options must make a valid run now, not at its first segment hours later
        arm_config(camp, arm, stop_at=min(seg, steps), warm=arm.warm_start).validate()
    return camp


def arm_config(camp: Campaign, arm: Arm, stop_at: int, warm: str | None) -> DraftTrainConfig:
    """The ``train draft`` config of one segment of ``arm``: shared options, the arm's own, the plan's steps and
    LR schedule, and where it stops. ``warm``: the ``--init`` folder (the arm's warm start; kept on every
    segment, since the resume check compares it)."""
    opts = {**camp.train, **arm.options}
    weights = {k: opts.pop(k) for k in list(opts) if k in HEAD_WEIGHT_FIELDS}
    opts.setdefault("val_every", camp.segment_steps)
    # bf16 autocast only where this machine multiplies bf16 natively (or CUDA), unless the plan says: a campaign
    # outlives machines, and on an AVX2-only CPU a bf16 step is several times slower than an fp32 one
    opts.setdefault("bf16", torch.cuda.is_available() or cpu_has_fast_bf16())
    return DraftTrainConfig(
        **opts,
        head_weights=HeadLossWeights(**weights),
        steps=camp.steps,
        stop_at=stop_at,
        run_dir=str(camp.arm_run_dir(arm)),
        out=str(camp.arm_out(arm)),
        init=warm,
        threads=camp.threads,
    )


def arm_step(camp: Campaign, arm: Arm) -> int:
    """Optimiser steps the arm has checkpointed (0: none). The checkpoint is memory-mapped: only its counters
    are read."""
    ck = camp.arm_run_dir(arm) / "checkpoint.pt"
    if not ck.exists():
        return 0
    return int(torch.load(ck, weights_only=False, mmap=True, map_location="cpu")["state"]["step"])


def next_segment(camp: Campaign) -> tuple[Arm, int, int] | None:
    """(arm, its step, the step this segment stops at) for the arm furthest behind (ties: file order), or None
    when every arm has trained its planned steps."""
    behind = [(arm_step(camp, a), i, a) for i, a in enumerate(camp.arms)]
    behind = [b for b in behind if b[0] < camp.steps]
    if not behind:
        return None
    step, _, arm = min(behind, key=lambda b: (b[0], b[1]))
    return arm, step, min(camp.steps, (step // camp.segment_steps + 1) * camp.segment_steps)
