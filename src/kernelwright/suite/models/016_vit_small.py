"""Vision Transformer as timm builds it (full: ViT-S/16 at 224², timm's
vit_small_patch16_224; its attention is scaled_dot_product_attention), random weights:
images -> class logits."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
patch_size = 16
hidden = 384
layers = 12
heads = 6
classes = 1000

SIZES = {
    "small": {"batch_size": 2, "image_size": 32, "patch_size": 8, "hidden": 32, "layers": 2,
              "heads": 4, "classes": 10},
    "full": {"batch_size": 8, "image_size": 224, "patch_size": 16, "hidden": 384,
             "layers": 12, "heads": 6, "classes": 1000},
}


class Model(nn.Module):
    def __init__(self, image_size, patch_size, hidden, layers, heads, classes):
        super().__init__()
        timm = require("timm")
        self.model = timm.models.vision_transformer.VisionTransformer(
            img_size=image_size, patch_size=patch_size, embed_dim=hidden, depth=layers,
            num_heads=heads, num_classes=classes).eval()

    def forward(self, images):
        return self.model(images)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, hidden, layers, heads, classes]
