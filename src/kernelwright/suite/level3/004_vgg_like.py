"""VGG-style network: stacks of 3x3 Conv2d + ReLU with max pooling, global mean, MLP head."""

import torch
from torch import nn

batch_size = 16
c1 = 64
c2 = 128
c3 = 256
image_size = 112
hidden = 512
num_classes = 1000

SIZES = {
    "small": {
        "batch_size": 2,
        "c1": 5,
        "c2": 7,
        "c3": 9,
        "image_size": 19,
        "hidden": 13,
        "num_classes": 10,
    },
    "full": {
        "batch_size": 16,
        "c1": 64,
        "c2": 128,
        "c3": 256,
        "image_size": 112,
        "hidden": 512,
        "num_classes": 1000,
    },
}


class Model(nn.Module):
    def __init__(self, c1, c2, c3, hidden, num_classes):
        super().__init__()
        config = [c1, c1, "M", c2, c2, "M", c3, c3, c3, "M"]
        layers = []
        channels = 3
        for item in config:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, item, kernel_size=3, padding=1), nn.ReLU()]
                channels = item
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(channels, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = x.mean(dim=(2, 3))
        return self.classifier(x)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [c1, c2, c3, hidden, num_classes]
