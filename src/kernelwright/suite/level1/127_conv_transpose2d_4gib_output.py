"""ConvTranspose2d 4x4, stride 2, padding 1, 128 -> 64 channels: a (64, 64, 512, 512) output."""

import torch
from torch import nn

batch_size = 64
in_channels = 128
out_channels = 64
height = 256
width = 256

# small: a 183 MiB output, over the software driver's 128 MiB binding; a channel a whole
# number of 32-byte units, as at the full size, so that chunks of the batch are aligned.
SIZES = {
    "small": {"batch_size": 9, "in_channels": 3, "out_channels": 5, "height": 511,
              "width": 520},
    "full": {"batch_size": 64, "in_channels": 128, "out_channels": 64, "height": 256,
             "width": 256},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size=4, stride=2, padding=1
        )

    def forward(self, x):
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
