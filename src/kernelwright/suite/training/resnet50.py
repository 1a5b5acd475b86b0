"""ResNet-50 (Bottleneck blocks, stages [3, 4, 6, 3]), our own code (_resnet.py), on synthetic
image classification. Full: ImageNet's shape (224x224, 1000 classes, width 64)."""

import torch
import torch.nn.functional as F
from torch import nn

from kernelwright.suite.training._resnet import Bottleneck, ResNet, image_batch

SIZES = {
    "small": {"batch": 2, "size": 64, "width": 4, "classes": 8},
    "full": {"batch": 32, "size": 224, "width": 64, "classes": 1000},
}
LR = 1e-3


def build(cfg: dict) -> nn.Module:
    return ResNet(Bottleneck, [3, 4, 6, 3], cfg["width"], cfg["classes"])


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels)


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    return image_batch(cfg, index)
