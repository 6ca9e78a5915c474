"""Loggers that a resumed run can write into without losing what its earlier attempts logged.

A resumed run goes on from its last checkpoint, at global step `purge_step`. What an interrupted
attempt logged after that checkpoint is logged again by the resumed one, so it is dropped:
- TensorBoard: Lightning's `TensorBoardLogger` passes `purge_step` to its `SummaryWriter`, which
  marks the restart in the event files; TensorBoard then hides the older events at or after it
  (else the curves double back). Its reader honours a restart mark only after a first one, so
  a fresh run writes one at step 0.
- CSV: Lightning's writer deletes an existing `metrics.csv` when it starts. `CSVLogger` below keeps
  the rows before `purge_step` instead, and the whole earlier file as `metrics.attempt<k>.csv` (as
  the run record keeps `metrics.attempt<k>.json`): nothing an attempt logged is lost.
"""

import csv
import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytorch_lightning import loggers
from pytorch_lightning.core.saving import save_hparams_to_yaml
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only

from attnexp.files import next_attempt
from attnexp.tasks.privates import drop_writer_setting


class CSVLogger(loggers.CSVLogger):
    """Lightning's CSV logger (`metrics.csv`, `hparams.yaml`), which keeps a resumed run's rows.

    Args:
        purge_step: the global step the run goes on from (0 for a fresh run); rows of
            `metrics.csv` before it are kept, later ones were logged by an interrupted attempt.
            None (once the run's writer is made): every row is kept.
    """

    def __init__(self, *args: Any, purge_step: int | None = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.purge_step = purge_step

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is not None:
            return self._experiment
        kept = self._keep_earlier_rows(self.purge_step)
        with warnings.catch_warnings():  # "Previous log files ... will be deleted": not these
            warnings.filterwarnings("ignore", message=".*exists and is not empty")
            writer = super().experiment  # deletes metrics.csv
        if kept:
            writer.metrics = kept
            writer.save()
        self.purge_step = None  # a writer made again for this run keeps every row
        return writer

    def __getstate__(self) -> dict[str, Any]:
        """A process it is pickled into makes its writer again, from the file as it is then."""
        return {**self.__dict__, "_experiment": None}

    def _keep_earlier_rows(self, step: int | None) -> list[dict[str, str]]:
        """Copy an earlier attempt's metrics.csv aside; return its rows before `step` (all of
        them, and nothing copied, for None: the file is this run's own)."""
        path = Path(self.log_dir) / "metrics.csv"
        if not path.is_file():
            return []
        if step is not None:
            shutil.copyfile(path, next_attempt(path)[1])
        with path.open(newline="") as file:
            rows = list(csv.DictReader(file))
        # A row holds only the metrics logged together: the other columns are empty.
        return [
            {key: value for key, value in row.items() if value != ""}
            for row in rows
            if step is None or int(row["step"]) < step
        ]


# The loggers that take `purge_step`.
RESUMABLE = (loggers.TensorBoardLogger, CSVLogger)


def start_logs(run_loggers: Iterable[loggers.Logger]) -> None:
    """Purge what an interrupted attempt logged, once, in the process in charge of the run and
    before it trains; the writers that ddp_spawn's processes make again then purge nothing (a
    TensorBoard restart mark written by the test process would hide all that fit logged)."""
    for logger in run_loggers:
        if isinstance(logger, RESUMABLE):
            _ = logger.experiment  # makes the writer (rank zero only: the others write nothing)
        if isinstance(logger, loggers.TensorBoardLogger):
            drop_writer_setting(logger, "purge_step")  # the writers ddp_spawn makes again


@rank_zero_only  # a relaunched rank's logger writes nothing
def log_run_hparams(
    logger: loggers.TensorBoardLogger, params: dict[str, Any], metrics: dict[str, float], step: int
) -> None:
    """The run's row of TensorBoard's HPARAMS tab: its settings and its final metrics, at `step`.

    Lightning's `log_hyperparams` also writes an experiment summary, which names the columns, and
    TensorBoard takes the first one it finds in the logdir for every run (a sweep over two models
    would show one model's settings and test sets only). Without one, TensorBoard builds the
    columns from every run's settings and scalar tags. Written at the final step (not 0), a
    resumed run's earlier final metrics are dropped with the rest of what it logged after its
    checkpoint (by TensorBoard's Python reader; the settings shown stay the first attempt's).
    """
    from torch.utils.tensorboard.summary import hparams

    logger.log_metrics(metrics, step)
    _, session_start, session_end = hparams(params, metrics)
    writer = logger.experiment._get_file_writer()
    writer.add_summary(session_start, step)
    writer.add_summary(session_end, step)
    # tb/hparams.yaml: Lightning wrote it, empty, before the test, and never writes it again
    save_hparams_to_yaml(Path(logger.log_dir) / logger.NAME_HPARAMS_FILE, params)


# Loggers that take figures and texts (the attention of the probe examples), and how.
FIGURE_LOGGERS = (loggers.TensorBoardLogger, loggers.MLFlowLogger, loggers.WandbLogger)


def figure_loggers(trainer) -> list[loggers.Logger]:
    return [lg for lg in trainer.loggers if isinstance(lg, FIGURE_LOGGERS)]


@rank_zero_only
def log_figure(logger: loggers.Logger, tag: str, figure, step: int) -> None:
    """A matplotlib figure at `step`: TensorBoard's image tab, an MLflow artifact
    (`<tag>/step<step>.png`), a W&B image."""
    if isinstance(logger, loggers.TensorBoardLogger):
        logger.experiment.add_figure(tag, figure, global_step=step, close=False)
    elif isinstance(logger, loggers.MLFlowLogger):
        logger.experiment.log_figure(logger.run_id, figure, f"{tag}/step{step:07d}.png")
    elif isinstance(logger, loggers.WandbLogger):
        logger.log_image(key=tag, images=[figure], step=step)


@rank_zero_only
def log_text(logger: loggers.Logger, tag: str, text: str, step: int) -> None:
    """A text at `step` (translations of the probe sentences), as log_figure logs figures."""
    if isinstance(logger, loggers.TensorBoardLogger):
        logger.experiment.add_text(tag, text, global_step=step)
    elif isinstance(logger, loggers.MLFlowLogger):
        logger.experiment.log_text(logger.run_id, text, f"{tag}/step{step:07d}.txt")
    elif isinstance(logger, loggers.WandbLogger):
        logger.log_text(key=tag, columns=["text"], data=[[text]], step=step)


def log_final(
    logger: loggers.Logger, params: dict[str, Any], metrics: dict[str, float], step: int
) -> None:
    """A run's settings and final metrics (final/...) in any logger: TensorBoard's HPARAMS tab
    (log_run_hparams), MLflow's params and metrics, W&B's config and summary."""
    if isinstance(logger, loggers.TensorBoardLogger):
        log_run_hparams(logger, params, metrics, step)
    elif isinstance(logger, loggers.MLFlowLogger | loggers.WandbLogger):
        logger.log_hyperparams(params)
        logger.log_metrics(metrics, step)
