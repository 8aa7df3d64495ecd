"""The models this repository ships, in one place: defaults of `serve`, `bench` and `make run`.

Paths are relative to the repository root, where the CLI is meant to run from.
"""

SHIPPED_TARGET = "models/tiny-s"
SHIPPED_DRAFT = "models/tiny-s-lilicorr-long"  # the default LiLiCorr drafter (serve, make run)
SHIPPED_DFLASH = "models/tiny-s-dflash-long"  # its vanilla DFlash baseline (same data, steps, seed, backbone)
