"""BERT encoder as transformers builds it (full: bert-base's config), random weights:
token ids -> last hidden state."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 8
seq_len = 128
hidden = 768
layers = 12
heads = 12
intermediate = 3072
vocab = 30522

SIZES = {
    "small": {"batch_size": 2, "seq_len": 7, "hidden": 32, "layers": 2, "heads": 4,
              "intermediate": 64, "vocab": 96},
    "full": {"batch_size": 8, "seq_len": 128, "hidden": 768, "layers": 12, "heads": 12,
             "intermediate": 3072, "vocab": 30522},
}


class Model(nn.Module):
    def __init__(self, hidden, layers, heads, intermediate, vocab):
        super().__init__()
        tf = require("transformers")
        config = tf.BertConfig(hidden_size=hidden, num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=intermediate,
                               vocab_size=vocab, max_position_embeddings=512, use_cache=False)
        self.model = tf.BertModel(config, add_pooling_layer=False).eval()

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [hidden, layers, heads, intermediate, vocab]
