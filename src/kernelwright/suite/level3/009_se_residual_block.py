"""Squeeze-and-excitation residual block: two conv-BN stages, SE gate (mean, Linears, sigmoid)."""

import torch
from torch import nn

batch_size = 32
channels = 128
height = 56
width = 56
reduction = 4

SIZES = {
    "small": {"batch_size": 2, "channels": 12, "height": 9, "width": 11},
    "full": {"batch_size": 32, "channels": 128, "height": 56, "width": 56},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


class Model(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.se_reduce = nn.Linear(channels, channels // reduction)
        self.se_expand = nn.Linear(channels // reduction, channels)
        _randomize_batchnorm(self)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        s = out.mean(dim=(2, 3))
        s = torch.sigmoid(self.se_expand(torch.relu(self.se_reduce(s))))
        out = out * s.view(s.shape[0], s.shape[1], 1, 1)
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, reduction]
