"""Conv2d 3x3, padding 1, 64 -> 128 channels on a (128, 64, 256, 256) batch: 2 GiB in, 4 GiB out."""

import torch
from torch import nn

batch_size = 128
in_channels = 64
out_channels = 128
height = 256
width = 256

# small: a 141 MiB output, over the software driver's 128 MiB binding; a channel a whole
# number of 32-byte units, as at the full size, so that chunks of the batch are aligned.
SIZES = {
    "small": {"batch_size": 7, "in_channels": 3, "out_channels": 5, "height": 1023,
              "width": 1032},
    "full": {"batch_size": 128, "in_channels": 64, "out_channels": 128, "height": 256,
             "width": 256},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
