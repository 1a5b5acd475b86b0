"""diffusers' UNet2DModel (a DDPM-style image U-Net with self-attention at the lower
resolutions) as diffusers builds it, random weights: a noisy image and its timesteps ->
the predicted noise (full: 64x64 images, DDPM's channels)."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 1
channels = 3
size = 64
widths = (128, 256, 256, 512)
attention = (False, False, True, False)  # which resolutions have self-attention blocks
layers = 2
groups = 32
head_dim = 64

SIZES = {
    "small": {"batch_size": 2, "channels": 3, "size": 16, "widths": (16, 32),
              "attention": (False, True), "layers": 1, "groups": 8, "head_dim": 8},
    "full": {"batch_size": 1, "channels": 3, "size": 64, "widths": (128, 256, 256, 512),
             "attention": (False, False, True, False), "layers": 2, "groups": 32,
             "head_dim": 64},
}


class Model(nn.Module):
    def __init__(self, channels, size, widths, attention, layers, groups, head_dim):
        super().__init__()
        df = require("diffusers")
        down = tuple("AttnDownBlock2D" if a else "DownBlock2D" for a in attention)
        up = tuple("AttnUpBlock2D" if a else "UpBlock2D" for a in reversed(attention))
        self.model = df.UNet2DModel(sample_size=size, in_channels=channels,
                                    out_channels=channels, layers_per_block=layers,
                                    block_out_channels=tuple(widths), down_block_types=down,
                                    up_block_types=up, norm_num_groups=groups,
                                    attention_head_dim=head_dim).eval()

    def forward(self, sample, timestep):
        return self.model(sample, timestep).sample


def get_inputs():
    return [torch.randn(batch_size, channels, size, size),
            torch.randint(0, 1000, (batch_size,)).float()]


def get_init_inputs():
    return [channels, size, widths, attention, layers, groups, head_dim]
