"""Vision Transformer as transformers builds it (full: ViT-B/16 at 224²), random weights:
images -> last hidden state."""

import torch
from torch import nn

try:
    import transformers
except ImportError as _exc:  # the file still imports; building Model says why it cannot
    transformers = None
    _IMPORT_ERROR = f"{type(_exc).__name__}: {_exc}"

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


def _require_transformers():
    if transformers is None:
        raise ImportError("this models-suite problem needs the transformers package "
                          f"(pip install transformers); importing it failed: {_IMPORT_ERROR}")
    return transformers


class Model(nn.Module):
    def __init__(self, image_size, patch_size, hidden, layers, heads, intermediate):
        super().__init__()
        tf = _require_transformers()
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
