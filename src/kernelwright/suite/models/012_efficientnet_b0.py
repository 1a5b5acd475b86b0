"""EfficientNet-B0 as torchvision builds it (full: B0's published config at 224²), random
weights: images -> class logits. The small size scales B0's width and depth down with the
multipliers torchvision's efficientnet_b1..b7 scale them up with."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
width_mult = 1.0  # channels of every stage
depth_mult = 1.0  # blocks per stage (rounded up)
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "width_mult": 0.25, "depth_mult": 0.25,
              "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "width_mult": 1.0, "depth_mult": 1.0,
             "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, width_mult, depth_mult, classes):
        super().__init__()
        efficientnet = require("torchvision").models.efficientnet
        stages, last_channel = efficientnet._efficientnet_conf(
            "efficientnet_b0", width_mult=width_mult, depth_mult=depth_mult)
        self.model = efficientnet.EfficientNet(stages, dropout=0.2, last_channel=last_channel,
                                               num_classes=classes).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [width_mult, depth_mult, classes]
