"""ResNet-18: 7x7 stem, max pool, four stages of two basic blocks (widths 64..512), mean, fc."""

import torch
from torch import nn

batch_size = 32
base_width = 64
image_size = 224
num_classes = 1000

SIZES = {
    "small": {"batch_size": 2, "base_width": 4, "image_size": 33, "num_classes": 7},
    "full": {"batch_size": 32, "base_width": 64, "image_size": 224, "num_classes": 1000},
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
    def __init__(self, in_channels, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels),
            )

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Model(nn.Module):
    def __init__(self, base_width, num_classes):
        super().__init__()
        w = base_width
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages = []
        in_channels = w
        for i, channels in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            stages.append(BasicBlock(in_channels, channels, stride))
            stages.append(BasicBlock(channels, channels, 1))
            in_channels = channels
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.stages(self.stem(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [base_width, num_classes]
