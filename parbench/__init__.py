"""parbench: measure how PyTorch trains the same ResNet with different parallelism strategies."""

__version__ = "0.1.0"
