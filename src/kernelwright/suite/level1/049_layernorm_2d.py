"""nn.LayerNorm over the last two dims (H, W) of an NCHW tensor, with a 2-D affine."""

import torch
from torch import nn

batch_size = 112
channels = 64
height = 256
width = 256

SIZES = {
    "small": {"batch_size": 2, "channels": 3, "height": 13, "width": 21},
    "full": {"batch_size": 112, "channels": 64, "height": 256, "width": 256},
}


class Model(nn.Module):
    def __init__(self, height, width):
        super().__init__()
        self.norm = nn.LayerNorm([height, width], eps=1e-6)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [height, width]
