"""ConvNeXt as timm builds it (full: ConvNeXt-T at 224²), random weights: images -> class
logits. Its layer scale starts at 1 rather than timm's training init of 1e-6, which would
leave every block's contribution far below the check's tolerance (the weights are random:
a trained model's layer scales are not small either)."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
depths = (3, 3, 9, 3)  # blocks per stage
dims = (96, 192, 384, 768)  # channels per stage
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "depths": (1, 1, 1, 1), "dims": (8, 16, 32, 64),
              "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "depths": (3, 3, 9, 3),
             "dims": (96, 192, 384, 768), "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, depths, dims, classes):
        super().__init__()
        timm = require("timm")
        self.model = timm.models.convnext.ConvNeXt(depths=tuple(depths), dims=tuple(dims),
                                                   num_classes=classes,
                                                   ls_init_value=1.0).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [depths, dims, classes]
