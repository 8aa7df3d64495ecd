"""A complete draft model: DFlash backbone, plus the LiLiCorr head when the geometry asks for one.

Its ``state_dict`` names are exactly the checkpoint's tensor names (Scheme A), so the checkpoint
module only has to validate, rename (Scheme B) and cast.
"""

from __future__ import annotations

import torch

from lilicorr.models.backbone import DFlashBackbone
from lilicorr.models.config import DraftConfig
from lilicorr.models.head import LiLiCorrHead


class DraftModel(DFlashBackbone):
    def __init__(self, cfg: DraftConfig):
        super().__init__(cfg)
        self.lilicorr = LiLiCorrHead(cfg) if cfg.lilicorr is not None else None

    @property
    def is_lilicorr(self) -> bool:
        return self.lilicorr is not None

    def init_weights(self, seed: int = 0, std: float = 0.02) -> DraftModel:
        """Deterministic training init: backbone Linears N(0, std), norms 1, head per its recipe."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("lilicorr."):
                    continue
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif "_conv." not in name and p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
            if self.lilicorr is not None:
                state = torch.random.get_rng_state()
                torch.manual_seed(seed + 1)
                self.lilicorr.reset_parameters()
                torch.random.set_rng_state(state)
        return self


def default_target_layer_ids(num_target_layers: int, num_features: int) -> list[int]:
    """DFlash's default taps: ``num_features`` layers spread uniformly from 1 to N−3.

    Targets too shallow for that (N − 4 < features − 1) spread over all layers instead, so the
    taps stay distinct.
    """
    n = num_target_layers
    if num_features == 1:
        return [n // 2]
    if n - 4 >= num_features - 1:
        return [round(1 + i * (n - 4) / (num_features - 1)) for i in range(num_features)]
    return sorted({round(i * (n - 1) / (num_features - 1)) for i in range(num_features)})


def default_layer_ids_for(num_target_layers: int) -> list[int]:
    """The trainer's default taps: five spread layers, or every layer but the last for shallow targets."""
    n = num_target_layers
    return default_target_layer_ids(n, 5) if n >= 8 else list(range(n - 1)) or [0]
