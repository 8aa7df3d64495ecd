"""Training modes, registered like decoding methods: what a mode trains and with which objectives.

A mode says whether the drafter carries a LiLiCorr head, whether the backbone trains (a frozen one comes
from ``--init``), which comparison arm trains beside it, and its objectives (``objectives.py``). The
trainer asks the mode and never names one. Adding a mode is one ``TrainingMode`` and ``register_mode``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lilicorr.models.arms import ARM_KINDS
from lilicorr.training.objectives import ArmObjective, DFlashObjective, LiLiCorrObjective, Objective


@dataclass(frozen=True)
class TrainingMode:
    name: str
    help: str
    head: bool = False  # the drafter has a LiLiCorr head (its geometry goes into the checkpoint)
    backbone: bool = True  # the backbone trains (False: frozen, from --init)
    arm: str | None = None  # a comparison arm trained beside the drafter (a sidecar in the folder)
    freezable: bool = False  # --freeze-backbone allowed (train only the arm on a frozen --init backbone)

    def trains_backbone(self, freeze: bool) -> bool:
        return self.backbone and not (freeze and self.freezable)

    def objectives(self, freeze: bool, arm=None) -> list[Objective]:
        """The losses a step sums: DFlash's when the backbone trains, then the head's or the arm's."""
        out: list[Objective] = [DFlashObjective()] if self.trains_backbone(freeze) else []
        if self.head:
            out.append(LiLiCorrObjective())
        if self.arm is not None:
            out.append(ArmObjective(arm))
        return out


MODES: dict[str, TrainingMode] = {}


def register_mode(mode: TrainingMode) -> TrainingMode:
    if mode.name in MODES:
        raise ValueError(f"training mode {mode.name!r} is registered twice")
    MODES[mode.name] = mode
    return mode


def get_mode(name: str) -> TrainingMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"mode {name!r}: expected one of {tuple(MODES)}") from None


register_mode(TrainingMode("dflash", "vanilla DFlash drafter"))
register_mode(TrainingMode("lilicorr", "DFlash co-trained with the LiLiCorr head", head=True))
register_mode(TrainingMode("head", "the LiLiCorr head on a frozen --init DFlash backbone", head=True, backbone=False))
for _kind in ARM_KINDS:
    register_mode(TrainingMode(_kind, f"comparison arm {_kind} on the same backbone recipe", arm=_kind, freezable=True))
