"""A block of your own, as a user writes it: the Linear Context Transform (LCT) of Ruan et al.,
"Linear Context Transform Block", AAAI 2020. It is not in visattn's zoo; the guide
(docs/guides/blocks.md, "Your own block in every command") trains, sweeps, joins a table and
exports it by name with ``--import my_blocks``.

For x of shape (N, C, H, W), with the C channels in G groups of C/G:
    z = mean over H, W of x                       (global context, (N, C))
    z_hat = (z - mu_g) / sqrt(sigma_g^2 + eps)   (normalised within each group g)
    a = sigmoid(w * z_hat + b)                   (a per-channel linear transform; w, b of size C)
    y = a * x
Parameters: 2C (w initialised to 0 and b to 1, the paper's and its code's choice, so each gate
starts at sigmoid(1) for every channel).
"""

import torch
from torch import nn

import visattn


@visattn.register_block("lct", family="channel", paper="Ruan et al., AAAI 2020")
class LCT(nn.Module):
    def __init__(self, channels: int, groups: int = 16, eps: float = 1e-5) -> None:
        super().__init__()
        if groups < 1 or channels % groups:
            raise ValueError(f"lct: groups={groups} must divide channels={channels}")
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.zeros(channels))
        self.bias = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        z = x.mean(dim=(2, 3)).view(n, self.groups, c // self.groups)
        mu = z.mean(dim=2, keepdim=True)
        var = z.var(dim=2, unbiased=False, keepdim=True)
        z = ((z - mu) / torch.sqrt(var + self.eps)).view(n, c)
        gate = torch.sigmoid(self.weight * z + self.bias)
        return x * gate.view(n, c, 1, 1)
