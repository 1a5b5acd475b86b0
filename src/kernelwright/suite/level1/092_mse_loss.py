"""Mean squared error loss (nn.MSELoss, mean reduction) between two large matrices."""

import torch
from torch import nn

batch_size = 8192
dim = 32768

SIZES = {
    "small": {"batch_size": 27, "dim": 61},
    "full": {"batch_size": 8192, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.MSELoss()

    def forward(self, predictions, targets):
        return self.loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim) * 0.5 + 0.25]


def get_init_inputs():
    return []
