"""ELU activation with alpha = 1.3 on an NCHW feature map."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 56
channels = 128
height = 256
width = 256

SIZES = {
    "small": {"batch_size": 2, "channels": 3, "height": 13, "width": 17},
    "full": {"batch_size": 56, "channels": 128, "height": 256, "width": 256},
}


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [1.3]
