"""Vision Transformer as torchvision builds it (full: ViT-B/16 at 224², its
nn.MultiheadAttention encoder), random weights: images -> class logits. torchvision starts
the classifier at zero (a training init: every logit would be 0 and the check would see
nothing); it gets nn.Linear's own random init instead."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
patch_size = 16
layers = 12
heads = 12
hidden = 768
mlp = 3072
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "patch_size": 8, "layers": 2, "heads": 4,
              "hidden": 32, "mlp": 64, "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "patch_size": 16, "layers": 12, "heads": 12,
             "hidden": 768, "mlp": 3072, "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, image_size, patch_size, layers, heads, hidden, mlp, classes):
        super().__init__()
        models = require("torchvision").models
        self.model = models.VisionTransformer(image_size, patch_size, num_layers=layers,
                                              num_heads=heads, hidden_dim=hidden, mlp_dim=mlp,
                                              num_classes=classes).eval()
        self.model.heads.head.reset_parameters()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, layers, heads, hidden, mlp, classes]
