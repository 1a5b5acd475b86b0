"""Cross-entropy loss (mean) over a batch of 65536 rows of 16384 logits (4 GiB), int64 targets."""

import torch
from torch import nn

batch_size = 65536
num_classes = 16384

# small: 188 MiB of logits, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"batch_size": 3001, "num_classes": 16383},
    "full": {"batch_size": 65536, "num_classes": 16384},
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
