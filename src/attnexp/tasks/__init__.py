"""LightningModules: loss, metrics, optimiser and logging around a framework-free model."""

from attnexp.tasks.classification import ClassificationTask

__all__ = ["ClassificationTask"]
