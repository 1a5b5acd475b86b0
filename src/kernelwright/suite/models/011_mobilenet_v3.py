"""MobileNetV3-Large as torchvision builds it (full: width 1.0 at 224²), random weights:
images -> class logits."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
width_mult = 1.0  # scales every layer's channels (torchvision rounds them to multiples of 8)
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "width_mult": 0.25, "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "width_mult": 1.0, "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, width_mult, classes):
        super().__init__()
        models = require("torchvision").models
        self.model = models.mobilenet_v3_large(weights=None, width_mult=width_mult,
                                               num_classes=classes).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [width_mult, classes]
