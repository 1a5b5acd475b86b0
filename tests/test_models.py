"""Small whole models against PyTorch eager: an MLP, a CNN and a transformer block."""

import pytest
import torch
from conftest import check
from torch import nn


def test_mlp():
    m = nn.Sequential(nn.Linear(20, 33), nn.ReLU(), nn.Linear(33, 17), nn.Tanh(), nn.Linear(17, 5))
    check(m, torch.randn(7, 20))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 5 * 5, 10)
        with torch.no_grad():  # non-trivial running statistics
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def test_cnn():
    check(SmallCNN(), torch.randn(2, 3, 11, 10))


class EncoderBlock(nn.Module):
    """A pre-norm transformer encoder block written with basic ops."""

    def __init__(self, d=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def test_transformer_encoder_block():
    check(EncoderBlock(), torch.randn(2, 9, 32))


@pytest.mark.slow
def test_torch_transformer_encoder_layer():
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.0, batch_first=True)
    check(layer, torch.randn(2, 5, 16))
