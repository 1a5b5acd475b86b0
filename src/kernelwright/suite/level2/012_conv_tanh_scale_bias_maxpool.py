"""Conv2d 3x3 -> tanh -> scale by 2 -> add a learned (C, 1, 1) bias -> MaxPool2d 2x2."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 96
width = 96

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 17, "width": 17},
    "full": {"batch_size": 64, "in_channels": 64, "out_channels": 128, "height": 96, "width": 96},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.pool = nn.MaxPool2d(kernel_size=2)

    def forward(self, x):
        x = torch.tanh(self.conv(x)) * self.scale + self.bias
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 2.0]
