"""Triplet margin loss (nn.TripletMarginLoss, margin 1.0, p=2) on anchor/positive/negative rows."""

import torch
from torch import nn

batch_size = 16384
dim = 8192

SIZES = {
    "small": {"batch_size": 19, "dim": 47},
    "full": {"batch_size": 16384, "dim": 8192},
}


class Model(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.loss = nn.TripletMarginLoss(margin=margin, p=2.0)

    def forward(self, anchor, positive, negative):
        return self.loss(anchor, positive, negative)


def get_inputs():
    anchor = torch.randn(batch_size, dim)
    positive = anchor + 0.5 * torch.randn(batch_size, dim)
    negative = torch.randn(batch_size, dim) * 0.8
    return [anchor, positive, negative]


def get_init_inputs():
    return [1.0]
