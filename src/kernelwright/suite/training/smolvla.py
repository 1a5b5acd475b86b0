"""A SmolVLA-style vision-language-action model: a ViT (patch convolution, learned
positions, pre-norm blocks) encodes the camera image; its patch features, projected,
are the prefix of a small SmolLM-style LM (RMSNorm, rotary, grouped-query attention,
SwiGLU) that reads the instruction tokens after them; an action head regresses a chunk
of future actions from the last hidden states, trained with a mean squared error. The
data: images of a bright square whose position and the instruction set the actions."""

import torch
import torch.nn.functional as F
from torch import nn

from kernelwright.suite.training._layers import EncoderBlock, LlamaBlock, RMSNorm, rope_tables

SIZES = {
    "small": {"batch": 2, "image": 16, "patch": 8, "vit_dim": 16, "vit_layers": 1,
              "vit_heads": 2, "dim": 16, "layers": 1, "heads": 2, "kv_heads": 1,
              "hidden": 32, "vocab": 16, "tokens": 4, "chunk": 2, "actions": 3},
    "full": {"batch": 16, "image": 512, "patch": 16, "vit_dim": 768, "vit_layers": 12,
             "vit_heads": 12, "dim": 960, "layers": 16, "heads": 15, "kv_heads": 5,
             "hidden": 2560, "vocab": 49152, "tokens": 48, "chunk": 50, "actions": 7},
}
LR = 1e-3


class SmolVLA(nn.Module):
    """(images [batch, 3, S, S], tokens [batch, T]) -> actions [batch, chunk, actions]."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        vd, d = cfg["vit_dim"], cfg["dim"]
        patches = (cfg["image"] // cfg["patch"]) ** 2
        self.chunk, self.actions = cfg["chunk"], cfg["actions"]
        self.patch = nn.Conv2d(3, vd, cfg["patch"], cfg["patch"])
        self.vit_pos = nn.Parameter(torch.randn(patches, vd) * 0.02)
        self.vit = nn.ModuleList(EncoderBlock(vd, cfg["vit_heads"])
                                 for _ in range(cfg["vit_layers"]))
        self.vit_norm = nn.LayerNorm(vd)
        self.connect = nn.Linear(vd, d, bias=False)
        self.emb = nn.Embedding(cfg["vocab"], d)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(
            LlamaBlock(d, cfg["heads"], cfg["kv_heads"], cfg["hidden"])
            for _ in range(cfg["layers"]))
        self.norm = RMSNorm(d)
        cos, sin = rope_tables(patches + cfg["tokens"], d // cfg["heads"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.action_head = nn.Sequential(nn.Linear(d, d), nn.SiLU(),
                                         nn.Linear(d, cfg["chunk"] * cfg["actions"]))

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        v = self.patch(images).flatten(2).transpose(1, 2) + self.vit_pos
        for block in self.vit:
            v = block(v)
        x = torch.cat([self.connect(self.vit_norm(v)), self.emb(tokens)], dim=1)
        for block in self.blocks:
            x = block(x, (self.cos, self.sin))
        pooled = self.norm(x)[:, -1]  # causal: the last position has read everything
        return self.action_head(pooled).view(-1, self.chunk, self.actions)


def build(cfg: dict) -> nn.Module:
    return SmolVLA(cfg)


def loss(predicted: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(predicted, actions)


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(images, instruction tokens, target actions): a bright square on noise; the
    actions move from the square's centre toward a goal the instruction's first token
    names, in equal steps over the chunk."""
    g = torch.Generator().manual_seed(1000 + index)
    n, s, chunk, dims = cfg["batch"], cfg["image"], cfg["chunk"], cfg["actions"]
    images = 0.1 * torch.randn(n, 3, s, s, generator=g)
    side = max(2, s // 4)
    corner = torch.randint(0, s - side + 1, (n, 2), generator=g)
    for i in range(n):
        r, c = corner[i].tolist()
        images[i, :, r:r + side, c:c + side] += 1.0
    tokens = torch.randint(0, cfg["vocab"], (n, cfg["tokens"]), generator=g)
    start = torch.zeros(n, dims)
    start[:, :2] = (corner.float() + side / 2) / s * 2 - 1
    goal = torch.sin(tokens[:, :1].float() * (1.0 + torch.arange(dims).float()))
    frac = torch.arange(1, chunk + 1).float()[None, :, None] / chunk
    return images, tokens, start[:, None] + frac * (goal - start)[:, None]
