"""Linear -> log_softmax over classes -> negate -> mean over the batch, giving (classes,)."""

import torch
from torch import nn

batch_size = 4096
in_features = 2048
out_features = 8192

SIZES = {
    "small": {"batch_size": 21, "in_features": 13, "out_features": 17},
    "full": {"batch_size": 4096, "in_features": 2048, "out_features": 8192},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = torch.log_softmax(self.fc(x), dim=1)
        return torch.mean(-x, dim=0)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
