"""An MLP classifier (Linear, GELU, LayerNorm) on points labelled by a fixed random
teacher network, so that the labels are learnable."""

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "small": {"batch": 16, "inputs": 12, "hidden": 32, "depth": 2, "classes": 5},
    "full": {"batch": 512, "inputs": 1024, "hidden": 4096, "depth": 4, "classes": 1000},
}
LR = 3e-3


def build(cfg: dict) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(cfg["inputs"], cfg["hidden"]), nn.GELU()]
    for _ in range(cfg["depth"] - 1):
        layers += [nn.LayerNorm(cfg["hidden"]), nn.Linear(cfg["hidden"], cfg["hidden"]),
                   nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(cfg["hidden"], cfg["classes"]))


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels)


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    teacher = torch.Generator().manual_seed(7)
    w = torch.randn(cfg["inputs"], cfg["classes"], generator=teacher)
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(cfg["batch"], cfg["inputs"], generator=g)
    return x, (x @ w).argmax(-1)
