"""ResNet-50 bottleneck stack (1x1-3x3-1x1, expansion 4): three stage-1, two stage-2 blocks."""

import torch
from torch import nn

batch_size = 32
base_width = 64
height = 56
width = 56

SIZES = {
    "small": {"batch_size": 2, "base_width": 3, "height": 13, "width": 11},
    "full": {"batch_size": 32, "base_width": 64, "height": 56, "width": 56},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels, mid, stride):
        super().__init__()
        out_channels = mid * self.expansion
        self.reduce = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.expand = nn.Conv2d(mid, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.projection = None
        if stride != 1 or in_channels != out_channels:
            self.projection = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x):
        identity = x if self.projection is None else self.projection(x)
        out = torch.relu(self.bn1(self.reduce(x)))
        out = torch.relu(self.bn2(self.conv(out)))
        out = self.bn3(self.expand(out))
        return torch.relu(out + identity)


class Model(nn.Module):
    def __init__(self, base_width):
        super().__init__()
        blocks = []
        in_channels = base_width
        for stage_width, count, stride in ((base_width, 3, 1), (2 * base_width, 2, 2)):
            for i in range(count):
                blocks.append(Bottleneck(in_channels, stage_width, stride if i == 0 else 1))
                in_channels = stage_width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        _randomize_batchnorm(self)

    def forward(self, x):
        return self.blocks(x)


def get_inputs():
    return [torch.relu(torch.randn(batch_size, base_width, height, width))]


def get_init_inputs():
    return [base_width]
