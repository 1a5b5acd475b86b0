"""Huber loss (nn.HuberLoss, delta 1.0, mean) between predictions and targets."""

import torch
from torch import nn

batch_size = 8192
dim = 32768

SIZES = {
    "small": {"batch_size": 25, "dim": 59},
    "full": {"batch_size": 8192, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.HuberLoss(delta=1.0)

    def forward(self, predictions, targets):
        return self.loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim) * 1.5, torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
