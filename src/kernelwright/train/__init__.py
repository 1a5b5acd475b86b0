"""Training: forward, loss, backward and the optimizer update compiled into one step."""

from .optim import SGD, Adam, AdamW, Optimizer
from .step import TrainingStep, compile_training

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "TrainingStep", "compile_training"]
