"""Tiny ViT: conv patch embedding, class token (expand + cat), position embedding, two blocks."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
image_size = 224
patch = 16
dim = 384
heads = 6
depth = 2
num_classes = 1000

SIZES = {
    "small": {
        "batch_size": 2,
        "image_size": 15,
        "patch": 5,
        "dim": 14,
        "heads": 2,
        "num_classes": 10,
    },
    "full": {
        "batch_size": 64,
        "image_size": 224,
        "patch": 16,
        "dim": 384,
        "heads": 6,
        "num_classes": 1000,
    },
}


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (hd**-0.5), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, image_size, patch, dim, heads, depth, num_classes):
        super().__init__()
        tokens = (image_size // patch) ** 2
        self.embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.dropout = nn.Dropout(0.1)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch, dim, heads, depth, num_classes]
