"""MLP-Mixer: patch-embedding conv, token- and channel-mixing MLPs with LayerNorm, mean, head."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
image_size = 224
patch = 16
dim = 512
token_hidden = 256
channel_hidden = 2048
depth = 2
num_classes = 1000

SIZES = {
    "small": {
        "batch_size": 2,
        "image_size": 20,
        "patch": 4,
        "dim": 11,
        "token_hidden": 13,
        "channel_hidden": 23,
        "num_classes": 7,
    },
    "full": {
        "batch_size": 64,
        "image_size": 224,
        "patch": 16,
        "dim": 512,
        "token_hidden": 256,
        "channel_hidden": 2048,
        "num_classes": 1000,
    },
}


class MixerLayer(nn.Module):
    def __init__(self, tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_fc1 = nn.Linear(tokens, token_hidden)
        self.token_fc2 = nn.Linear(token_hidden, tokens)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_fc1 = nn.Linear(dim, channel_hidden)
        self.channel_fc2 = nn.Linear(channel_hidden, dim)

    def forward(self, x):
        y = self.norm1(x).transpose(1, 2)
        y = self.token_fc2(F.gelu(self.token_fc1(y)))
        x = x + y.transpose(1, 2)
        y = self.channel_fc2(F.gelu(self.channel_fc1(self.norm2(x))))
        return x + y


class Model(nn.Module):
    def __init__(self, image_size, patch, dim, token_hidden, channel_hidden, depth, num_classes):
        super().__init__()
        tokens = (image_size // patch) ** 2
        self.embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.layers = nn.Sequential(
            *[MixerLayer(tokens, dim, token_hidden, channel_hidden) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).transpose(1, 2)
        x = self.norm(self.layers(x))
        return self.head(x.mean(dim=1))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch, dim, token_hidden, channel_hidden, depth, num_classes]
