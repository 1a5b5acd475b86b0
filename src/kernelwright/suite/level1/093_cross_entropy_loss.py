"""Cross-entropy loss over a large vocabulary: float logits, int64 class targets, mean."""

import torch
from torch import nn

batch_size = 8192
num_classes = 32768

SIZES = {
    "small": {"batch_size": 23, "num_classes": 101},
    "full": {"batch_size": 8192, "num_classes": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.CrossEntropyLoss()

    def forward(self, logits, targets):
        return self.loss(logits, targets)


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 2.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []
