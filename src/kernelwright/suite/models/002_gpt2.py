"""GPT-2 as transformers builds it (full: GPT-2 small's config), random weights:
token ids -> logits."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 1
seq_len = 512
hidden = 768
layers = 12
heads = 12
vocab = 50257
positions = 1024

SIZES = {
    "small": {"batch_size": 2, "seq_len": 7, "hidden": 32, "layers": 2, "heads": 4,
              "vocab": 96, "positions": 16},
    "full": {"batch_size": 1, "seq_len": 512, "hidden": 768, "layers": 12, "heads": 12,
             "vocab": 50257, "positions": 1024},
}


class Model(nn.Module):
    def __init__(self, hidden, layers, heads, vocab, positions):
        super().__init__()
        tf = require("transformers")
        config = tf.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, vocab_size=vocab,
                               n_positions=positions, bos_token_id=vocab - 1,
                               eos_token_id=vocab - 1, use_cache=False)
        self.model = tf.GPT2LMHeadModel(config).eval()

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [hidden, layers, heads, vocab, positions]
