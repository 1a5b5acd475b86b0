"""Small ResNet: conv stem, two basic residual blocks (one downsampling), global mean, Linear."""

import torch
from torch import nn

batch_size = 64
channels = 64
image_size = 64
num_classes = 100

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "image_size": 13, "num_classes": 7},
    "full": {"batch_size": 64, "channels": 64, "image_size": 64, "num_classes": 100},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(
            in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False
        )
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + identity)


class Model(nn.Module):
    def __init__(self, channels, num_classes):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
        )
        self.block1 = BasicBlock(channels, channels, stride=1)
        self.block2 = BasicBlock(channels, 2 * channels, stride=2)
        self.fc = nn.Linear(2 * channels, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [channels, num_classes]
