"""DFlash2 grouped dynamic convolution, wrapped around both sublayers of every draft layer.

Causal *within* a block and never across blocks, so a shorter draft sees exactly the prefix of the
full-block computation. Initialised as an exact identity (tap 0 = 1, projection = 0), so enabling it
on a trained backbone changes nothing until it is trained.
"""

from __future__ import annotations

import torch
from torch import nn


class GroupedDynamicConv(nn.Module):
    """Coefficients ``c = kernel_projection(u)`` → ``[2, taps, hidden/group]``; side 0 prepares the
    sublayer input, side 1 finishes its output with the same coefficients."""

    def __init__(self, hidden: int, taps: int, group: int):
        super().__init__()
        self.taps, self.group, self.groups = taps, group, hidden // group
        self.base_kernel = nn.Parameter(torch.zeros(2, taps, hidden))
        with torch.no_grad():
            self.base_kernel[:, 0] = 1.0
        self.kernel_projection = nn.Linear(hidden, 2 * taps * self.groups, bias=False)
        nn.init.zeros_(self.kernel_projection.weight)

    def coefficients(self, u: torch.Tensor) -> torch.Tensor:
        """``u`` ``[batch, rows, hidden]`` → per-channel kernels ``[batch, rows, 2, taps, hidden]``."""
        b, r, _ = u.shape
        c = self.kernel_projection(u).view(b, r, 2, self.taps, self.groups)
        c = c.repeat_interleave(self.group, dim=-1)  # channel ch uses group ch // group
        return self.base_kernel.to(u.dtype) + c

    def apply(self, x: torch.Tensor, kernels: torch.Tensor, side: int, block: int) -> torch.Tensor:
        """``y_r = Σ_t 1{pos(r) ≥ t} k[r, side, t] ⊙ x_{r−t}`` with ``pos(r) = r mod block``."""
        rows = x.shape[1]
        pos = torch.arange(rows, device=x.device) % block  # [rows]
        y = kernels[:, :, side, 0] * x
        for t in range(1, self.taps):
            shifted = torch.zeros_like(x)
            shifted[:, t:] = x[:, :-t]
            keep = (pos >= t).to(x.dtype)[None, :, None]
            y = y + keep * kernels[:, :, side, t] * shifted
        return y
