"""Qwen2 decoder as transformers builds it (full: Qwen2-0.5B's config), random weights:
token ids -> logits."""

import torch
from torch import nn

from kernelwright.suite.models._library import require

batch_size = 1
seq_len = 512
hidden = 896
layers = 24
heads = 14
kv_heads = 2
intermediate = 4864
vocab = 151936

SIZES = {
    "small": {"batch_size": 2, "seq_len": 7, "hidden": 32, "layers": 2, "heads": 4,
              "kv_heads": 2, "intermediate": 64, "vocab": 96},
    "full": {"batch_size": 1, "seq_len": 512, "hidden": 896, "layers": 24, "heads": 14,
             "kv_heads": 2, "intermediate": 4864, "vocab": 151936},
}


class Model(nn.Module):
    def __init__(self, hidden, layers, heads, kv_heads, intermediate, vocab):
        super().__init__()
        tf = require("transformers")
        config = tf.Qwen2Config(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab,
            max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
            tie_word_embeddings=True, use_cache=False)
        self.model = tf.Qwen2ForCausalLM(config).eval()

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [hidden, layers, heads, kv_heads, intermediate, vocab]
