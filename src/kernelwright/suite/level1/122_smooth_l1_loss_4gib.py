"""Smooth L1 loss (nn.SmoothL1Loss, beta 1, mean) of two 32768 x 32768 matrices (4 GiB each)."""

import torch
from torch import nn

rows = 32768
cols = 32768

# small: 172 MiB per input, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"rows": 1001, "cols": 45001},
    "full": {"rows": 32768, "cols": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.SmoothL1Loss()

    def forward(self, predictions, targets):
        return self.loss(predictions, targets)


def get_inputs():
    return [torch.randn(rows, cols) * 1.5, torch.randn(rows, cols)]


def get_init_inputs():
    return []
