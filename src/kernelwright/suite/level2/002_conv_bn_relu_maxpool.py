"""Conv2d 3x3 -> BatchNorm2d (eval) -> ReLU -> MaxPool2d 2x2."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 19, "width": 19},
    "full": {
        "batch_size": 64,
        "in_channels": 64,
        "out_channels": 128,
        "height": 112,
        "width": 112,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.pool = nn.MaxPool2d(2)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x))))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
