"""The steps that train and evaluate share: one lifecycle for a run record, the data a run read
into its record, the CPU kernels check.

    with recording(record):
        ...                      # a failure is recorded (status=failed) and raised again
    record.complete(metrics)
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytorch_lightning as pl
from pytorch_lightning.accelerators import CPUAccelerator

from attnexp.errors import ConfigError
from attnexp.runner.cpu_kernels import check_cpu_kernels
from attnexp.runs.record import RunRecord


@contextmanager
def recording(
    record: RunRecord,
    refusal_of: Callable[[BaseException], ConfigError | None] | None = None,
    after_failure: Callable[[BaseException], None] | None = None,
) -> Iterator[RunRecord]:
    """Starts `record`; any exception (Ctrl-C and crashes alike) leaves status=failed behind and
    goes on. `refusal_of(err)`: the ConfigError that says `err` better, recorded and raised in
    its place; `after_failure(err)` runs once the failure is recorded (it may end the process)."""
    record.start()
    try:
        yield record
    except BaseException as err:
        refusal = refusal_of(err) if refusal_of is not None else None
        record.fail(refusal or err)
        if after_failure is not None:
            after_failure(err)
        if refusal is not None:
            raise refusal from err
        raise


def record_data(record: RunRecord, datamodule, data_dir: str, **extra) -> None:
    """What the run read: the data's source, folder and per-split fingerprints (and `extra`)."""
    record.update(
        data_source=datamodule.source,
        data_fingerprints=datamodule.fingerprints,
        data_dir=data_dir,
        **extra,
    )


def warn_about_data(record: RunRecord, datamodule, done: str) -> None:
    """The data's notes, and a run on the embedded sample (`done`: "trained", "evaluated"), as
    warnings of the record."""
    if datamodule.source == "sample":
        record.warn(f"data: {done} on the embedded sample, not the full dataset")
    for note in datamodule.notes:
        record.warn(f"data: {note}")


def check_kernels(trainer: pl.Trainer, task: pl.LightningModule) -> None:
    """On the CPU: the model's kernels run in trainer.precision (cpu_kernels.py)."""
    if isinstance(trainer.accelerator, CPUAccelerator):
        check_cpu_kernels(trainer.precision, task.model, "trainer.precision")
