"""A small CNN classifier (convolution, batch norm in train mode, ReLU, max pooling,
adaptive average pooling) on images labelled by their dominant colour channel and
brightness of the left half."""

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "small": {"batch": 4, "size": 12, "width": 8, "classes": 6},
    "full": {"batch": 256, "size": 32, "width": 64, "classes": 6},
}
LR = 3e-3


def build(cfg: dict) -> nn.Module:
    w = cfg["width"]

    def stage(cin: int, cout: int) -> list[nn.Module]:
        # no bias before batch norm: its gradient is rounding noise, which Adam scales up
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*stage(3, w), *stage(w, 2 * w),
                         nn.Conv2d(2 * w, 4 * w, 3, padding=1, bias=False),
                         nn.BatchNorm2d(4 * w), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4 * w, cfg["classes"]))


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels)


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(cfg["batch"], 3, cfg["size"], cfg["size"], generator=g)
    means = x.mean((2, 3))
    left = x[..., : cfg["size"] // 2].mean((1, 2, 3)) > 0
    return x, means.argmax(-1) + 3 * left.long()
