"""Cosine-similarity loss: mean over rows of 1 - F.cosine_similarity(a, b, dim=1)."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 8192
dim = 32768

SIZES = {
    "small": {"batch_size": 27, "dim": 57},
    "full": {"batch_size": 8192, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(1.0 - F.cosine_similarity(predictions, targets, dim=1))


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = predictions + torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
