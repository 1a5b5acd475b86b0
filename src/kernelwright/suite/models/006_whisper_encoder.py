"""Whisper's audio encoder as transformers builds it (full: whisper-tiny's config, 30 s of
audio), random weights: log-mel features -> last hidden state."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 1
mel_bins = 80
positions = 1500  # encoder positions; the input has twice as many frames (stride-2 conv)
hidden = 384
layers = 4
heads = 6
ffn = 1536

SIZES = {
    "small": {"batch_size": 2, "mel_bins": 8, "positions": 6, "hidden": 32, "layers": 2,
              "heads": 4, "ffn": 64},
    "full": {"batch_size": 1, "mel_bins": 80, "positions": 1500, "hidden": 384, "layers": 4,
             "heads": 6, "ffn": 1536},
}


class Model(nn.Module):
    def __init__(self, mel_bins, positions, hidden, layers, heads, ffn):
        super().__init__()
        tf = require("transformers")
        config = tf.WhisperConfig(num_mel_bins=mel_bins, max_source_positions=positions,
                                  d_model=hidden, encoder_layers=layers,
                                  encoder_attention_heads=heads, encoder_ffn_dim=ffn,
                                  use_cache=False)
        self.model = tf.models.whisper.modeling_whisper.WhisperEncoder(config).eval()

    def forward(self, input_features):
        return self.model(input_features=input_features).last_hidden_state


def get_inputs():
    return [torch.randn(batch_size, mel_bins, 2 * positions)]


def get_init_inputs():
    return [mel_bins, positions, hidden, layers, heads, ffn]
