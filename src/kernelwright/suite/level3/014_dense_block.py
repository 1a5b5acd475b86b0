"""DenseNet-style block: four BN -> ReLU -> 3x3 Conv2d layers joined by cat, then a transition."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
growth = 32
height = 56
width = 56
num_layers = 4

SIZES = {
    "small": {"batch_size": 2, "in_channels": 5, "growth": 3, "height": 13, "width": 13},
    "full": {"batch_size": 64, "in_channels": 64, "growth": 32, "height": 56, "width": 56},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


class DenseLayer(nn.Module):
    def __init__(self, in_channels, growth):
        super().__init__()
        self.bn = nn.BatchNorm2d(in_channels)
        self.conv = nn.Conv2d(in_channels, growth, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(torch.relu(self.bn(x)))], dim=1)


class Model(nn.Module):
    def __init__(self, in_channels, growth, num_layers):
        super().__init__()
        layers = []
        channels = in_channels
        for _ in range(num_layers):
            layers.append(DenseLayer(channels, growth))
            channels += growth
        self.block = nn.Sequential(*layers)
        self.transition = nn.Sequential(
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels // 2, kernel_size=1, bias=False),
            nn.AvgPool2d(kernel_size=2, stride=2),
        )
        _randomize_batchnorm(self)

    def forward(self, x):
        return self.transition(self.block(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, growth, num_layers]
