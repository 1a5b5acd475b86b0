"""Swin Transformer as torchvision builds it (full: Swin-T at 224², 7x7 windows), random
weights: images -> class logits. At the small size the first stage's 8x8 tokens hold four
4x4 windows, so its second block runs the shifted windows with their attention mask."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
patch_size = 4
embed_dim = 96
depths = (2, 2, 6, 2)  # blocks per stage; every second block shifts its windows
heads = (3, 6, 12, 24)
window = 7
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "patch_size": 4, "embed_dim": 16,
              "depths": (2, 2, 2, 2), "heads": (1, 2, 4, 8), "window": 4, "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "patch_size": 4, "embed_dim": 96,
             "depths": (2, 2, 6, 2), "heads": (3, 6, 12, 24), "window": 7, "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, patch_size, embed_dim, depths, heads, window, classes):
        super().__init__()
        models = require("torchvision").models
        self.model = models.SwinTransformer([patch_size, patch_size], embed_dim, list(depths),
                                            list(heads), [window, window],
                                            stochastic_depth_prob=0.2,
                                            num_classes=classes).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [patch_size, embed_dim, depths, heads, window, classes]
