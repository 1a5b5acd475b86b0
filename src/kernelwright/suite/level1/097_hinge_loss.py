"""Multi-label hinge loss: mean(clamp(1 - score * (2 * label - 1), min=0)), int64 labels."""

import torch
from torch import nn

batch_size = 8192
num_labels = 16384

SIZES = {
    "small": {"batch_size": 23, "num_labels": 53},
    "full": {"batch_size": 8192, "num_labels": 16384},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores, labels):
        signs = labels.to(scores.dtype) * 2.0 - 1.0
        return torch.clamp(1.0 - scores * signs, min=0.0).mean()


def get_inputs():
    return [torch.randn(batch_size, num_labels), torch.randint(0, 2, (batch_size, num_labels))]


def get_init_inputs():
    return []
