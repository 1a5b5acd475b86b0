"""LSTM language model: token embedding (one-hot @ table), two-layer nn.LSTM, vocabulary Linear."""

import torch
from torch import nn

batch_size = 32
seq_len = 128
vocab_size = 10000
embed_dim = 512
hidden = 1024

SIZES = {
    "small": {"batch_size": 2, "seq_len": 5, "vocab_size": 29, "embed_dim": 7, "hidden": 9},
    "full": {"batch_size": 32, "seq_len": 128, "vocab_size": 10000, "embed_dim": 512,
             "hidden": 1024},
}


class Model(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden):
        super().__init__()
        # The embedding lookup is a one-hot product: kernelwright has no aten.embedding lowering.
        self.embedding = nn.Parameter(torch.randn(vocab_size, embed_dim))
        self.register_buffer("vocab", torch.arange(vocab_size))
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=2, batch_first=True, dropout=0.1)
        self.decoder = nn.Linear(hidden, vocab_size)

    def forward(self, tokens):
        one_hot = (tokens.unsqueeze(-1) == self.vocab).to(self.embedding.dtype)
        x = torch.matmul(one_hot, self.embedding)
        out, _ = self.lstm(x)
        return self.decoder(out)


def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab_size, embed_dim, hidden]
