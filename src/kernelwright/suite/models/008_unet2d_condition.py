"""diffusers' UNet2DConditionModel (a latent-diffusion U-Net whose transformer blocks
cross-attend to text embeddings) as diffusers builds it, random weights: a noisy latent,
its timesteps and the text encoder's hidden states -> the predicted noise (full: Stable
Diffusion 1.5's U-Net config on a 64x64 latent and 77 text tokens)."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 1
channels = 4
size = 64
widths = (320, 640, 1280, 1280)
cross = (True, True, True, False)  # which resolutions cross-attend
layers = 2
groups = 32
heads = 8
text_tokens = 77
text_dim = 768

SIZES = {
    "small": {"batch_size": 2, "channels": 4, "size": 8, "widths": (16, 32),
              "cross": (True, False), "layers": 1, "groups": 8, "heads": 4, "text_tokens": 5,
              "text_dim": 24},
    "full": {"batch_size": 1, "channels": 4, "size": 64, "widths": (320, 640, 1280, 1280),
             "cross": (True, True, True, False), "layers": 2, "groups": 32, "heads": 8,
             "text_tokens": 77, "text_dim": 768},
}


class Model(nn.Module):
    def __init__(self, channels, size, widths, cross, layers, groups, heads, text_dim):
        super().__init__()
        df = require("diffusers")
        down = tuple("CrossAttnDownBlock2D" if c else "DownBlock2D" for c in cross)
        up = tuple("CrossAttnUpBlock2D" if c else "UpBlock2D" for c in reversed(cross))
        self.model = df.UNet2DConditionModel(
            sample_size=size, in_channels=channels, out_channels=channels,
            layers_per_block=layers, block_out_channels=tuple(widths), down_block_types=down,
            up_block_types=up, norm_num_groups=groups, attention_head_dim=heads,
            cross_attention_dim=text_dim).eval()

    def forward(self, sample, timestep, text):
        return self.model(sample, timestep, encoder_hidden_states=text).sample


def get_inputs():
    return [torch.randn(batch_size, channels, size, size),
            torch.randint(0, 1000, (batch_size,)).float(),
            torch.randn(batch_size, text_tokens, text_dim)]


def get_init_inputs():
    return [channels, size, widths, cross, layers, groups, heads, text_dim]
