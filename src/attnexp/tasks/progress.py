"""What a run shows while it trains: the rich progress bar on a terminal; in a log file or a pipe,
a plain line now and then instead of a bar redrawn with carriage returns; never Lightning's
advertisements."""

import logging
import sys
import time
from typing import TextIO

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, RichProgressBar

log = logging.getLogger(__name__)


class PlainProgress(ProgressBar):
    """A line per `every_s` seconds of training, and one at each epoch's end, through logging."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.every_s, self._enabled, self._last = every_s, True, 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.monotonic()
        if self._enabled and now - self._last >= self.every_s:
            self._last = now
            self._say(trainer, pl_module, f"batch {batch_idx + 1}/{self.total_train_batches}")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled:
            self._say(trainer, pl_module, "done")

    def _say(self, trainer: pl.Trainer, pl_module: pl.LightningModule, where: str) -> None:
        metrics = self.get_metrics(trainer, pl_module)
        shown = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in metrics.items()
            if k != "v_num"
        )
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        log.info(
            "epoch %d%s: %s%s", trainer.current_epoch, epochs, where, f" ({shown})" if shown else ""
        )


def progress_callbacks(enabled: bool, stream: TextIO | None = None) -> list[pl.Callback]:
    """The progress display for `stream` (stderr): [] when off or on a terminal without `rich`
    (Lightning's own bar then)."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return []
    if not stream.isatty():
        return [PlainProgress()]
    try:
        return [RichProgressBar()]
    except ModuleNotFoundError:  # rich not installed: Lightning's tqdm bar
        return []


class NoTips(logging.Filter):
    """Drops Lightning's "💡 Tip: ... try installing ..." lines (advertisements for its cloud
    services, printed at every run). Should Lightning reword them, they simply show again."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


def quiet_lightning_tips() -> None:
    tips = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(f, NoTips) for f in tips.filters):
        tips.addFilter(NoTips())
