"""Vision Transformer as transformers builds it (full: ViT-B/16 at 224²), random weights:
images -> last hidden state."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
image_size = 224
patch_size = 16
hidden = 768
layers = 12
heads = 12
intermediate = 3072

SIZES = {
    "small": {"batch_size": 2, "image_size": 16, "patch_size": 4, "hidden": 32, "layers": 2,
              "heads": 4, "intermediate": 64},
    "full": {"batch_size": 8, "image_size": 224, "patch_size": 16, "hidden": 768,
             "layers": 12, "heads": 12, "intermediate": 3072},
}


class Model(nn.Module):
    def __init__(self, image_size, patch_size, hidden, layers, heads, intermediate):
        super().__init__()
        tf = require("transformers")
        config = tf.ViTConfig(image_size=image_size, patch_size=patch_size, hidden_size=hidden,
                              num_hidden_layers=layers, num_attention_heads=heads,
                              intermediate_size=intermediate)
        self.model = tf.ViTModel(config, add_pooling_layer=False).eval()

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, hidden, layers, heads, intermediate]
