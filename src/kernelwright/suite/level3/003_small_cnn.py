"""Small CNN: two (Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d) stages, flatten, two Linears."""

import torch
from torch import nn

batch_size = 256
c1 = 32
c2 = 64
image_size = 128
hidden = 256
num_classes = 100

SIZES = {
    "small": {
        "batch_size": 2,
        "c1": 5,
        "c2": 7,
        "image_size": 17,
        "hidden": 19,
        "num_classes": 10,
    },
    "full": {
        "batch_size": 256,
        "c1": 32,
        "c2": 64,
        "image_size": 128,
        "hidden": 256,
        "num_classes": 100,
    },
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
    def __init__(self, c1, c2, image_size, hidden, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, kernel_size=3, padding=1),
            nn.BatchNorm2d(c1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.BatchNorm2d(c2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 2 // 2
        self.classifier = nn.Sequential(
            nn.Linear(c2 * side * side, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, num_classes),
        )
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.reshape(x.shape[0], -1))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [c1, c2, image_size, hidden, num_classes]
