"""attnexp: run, sweep, compare and look inside attention models."""

__version__ = "0.1.0"
