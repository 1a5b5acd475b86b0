"""ResNet (He et al.) built here: a 7x7 stride-2 stem with max pooling, four stages of
basic (ResNet-18/34) or bottleneck (ResNet-50) residual blocks with batch norm, the
first block of stages 2-4 at stride 2 with a 1x1 projection shortcut, global average
pooling and a linear classifier, each residual branch's last batch-norm scale
initialised to zero (Goyal et al.) so that the deep net starts well conditioned; and its
synthetic image-classification data."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, k: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]


class Basic(nn.Module):
    """Two 3x3 convolutions."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, width, 3, stride), nn.ReLU(),
                                  *conv_bn(width, width, 3))
        self.short = nn.Sequential(*conv_bn(cin, width, 1, stride)) \
            if stride != 1 or cin != width else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.short(x))


class Bottleneck(nn.Module):
    """1x1 down to `width`, 3x3 (strided), 1x1 up to 4 * width."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * self.expansion
        self.body = nn.Sequential(*conv_bn(cin, width, 1), nn.ReLU(),
                                  *conv_bn(width, width, 3, stride), nn.ReLU(),
                                  *conv_bn(width, out, 1))
        self.short = nn.Sequential(*conv_bn(cin, out, 1, stride)) \
            if stride != 1 or cin != out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    """images [batch, 3, H, W] -> logits [batch, classes]."""

    def __init__(self, block: type, depths: list[int], width: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(3, width, 7, 2), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, depth in enumerate(depths):
            w = width * 2 ** i
            for j in range(depth):
                stages.append(block(cin, w, 2 if j == 0 and i > 0 else 1))
                cin = w * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, classes)
        for block in stages:  # each residual branch starts at zero (its last norm's scale):
            nn.init.zeros_(block.body[-1].weight)  # the net starts near the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(x.mean((2, 3)))


def image_batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images; the label is the quadrant of highest mean brightness plus 4 when the
    red channel outweighs the blue, modulo the class count."""
    g = torch.Generator().manual_seed(1000 + index)
    s = cfg["size"]
    x = torch.randn(cfg["batch"], 3, s, s, generator=g)
    quads = torch.stack([x[:, :, :s // 2, :s // 2].mean((1, 2, 3)),
                         x[:, :, :s // 2, s // 2:].mean((1, 2, 3)),
                         x[:, :, s // 2:, :s // 2].mean((1, 2, 3)),
                         x[:, :, s // 2:, s // 2:].mean((1, 2, 3))], -1)
    red = (x[:, 0].mean((1, 2)) > x[:, 2].mean((1, 2))).long()
    return x, (quads.argmax(-1) + 4 * red) % cfg["classes"]
