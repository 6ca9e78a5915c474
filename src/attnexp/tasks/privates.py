"""The private Lightning and OmegaConf attributes the package relies on, in one place.

Each has no public equivalent; tests/tasks/test_privates.py checks that the installed versions
still have them, so an upgrade that drops one fails there, by name, not deep inside a run.
"""

from typing import Any


def logger_step(trainer: Any) -> int:
    """The step Lightning's loggers write the val/* points at (optimizer steps taken, counted
    across a resume): `fit_loop.epoch_loop._batches_that_stepped`."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def drop_writer_setting(logger: Any, key: str) -> None:
    """Leave `key` out of the keyword arguments a Lightning logger (TensorBoardLogger) passes to
    the writers it makes later: its `_kwargs`."""
    logger._kwargs.pop(key, None)


def full_key(node: Any) -> str:
    """The dotted key of an OmegaConf node within its config ("" at the root):
    `node._get_full_key(None)`."""
    return node._get_full_key(None)
