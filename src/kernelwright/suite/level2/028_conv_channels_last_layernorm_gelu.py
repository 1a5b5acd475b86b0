"""Conv2d 3x3 -> permute to NHWC -> LayerNorm over channels -> GELU -> permute back to NCHW."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 32
in_channels = 96
out_channels = 128
height = 96
width = 96

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 11, "height": 9, "width": 13},
    "full": {"batch_size": 32, "in_channels": 96, "out_channels": 128, "height": 96, "width": 96},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(out_channels, eps=1e-6)

    def forward(self, x):
        x = self.conv(x).permute(0, 2, 3, 1)
        x = F.gelu(self.norm(x))
        return x.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
