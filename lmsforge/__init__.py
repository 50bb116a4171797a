"""lmsforge: keep Large Model Support alive across PyTorch and TensorFlow releases."""

__version__ = "0.2.0"
