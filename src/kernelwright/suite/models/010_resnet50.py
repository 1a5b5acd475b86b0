"""ResNet-50 as torchvision builds it (full: its published config at 224², batch 64), random
weights: images -> class logits."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 64
image_size = 224
layers = (3, 4, 6, 3)  # bottleneck blocks per stage
width_per_group = 64  # a bottleneck's inner width at the first stage
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "layers": (1, 1, 1, 1), "width_per_group": 8,
              "classes": 10},
    "full": {"batch_size": 64, "image_size": 224, "layers": (3, 4, 6, 3),
             "width_per_group": 64, "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, layers, width_per_group, classes):
        super().__init__()
        resnet = require("torchvision").models.resnet
        self.model = resnet.ResNet(resnet.Bottleneck, list(layers), num_classes=classes,
                                   width_per_group=width_per_group).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [layers, width_per_group, classes]
