"""Lightning callbacks: attention figures to TensorBoard (and MLflow, W&B), a per-epoch history in
metrics.json, and a clean end of the process group of spawned ranks."""

import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import matplotlib.pyplot as plt
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies.launchers import _MultiProcessingLauncher

from attnexp.errors import ConfigError
from attnexp.predictors import predictor_for
from attnexp.rules import POSITIVE
from attnexp.tasks.loggers import figure_loggers, log_figure, log_text
from attnexp.tasks.privates import logger_step

log = logging.getLogger(__name__)


def full_parameters(trainer: pl.Trainer) -> AbstractContextManager:
    """Where the model can be called outside the strategy's forward. Under FSDP (trainer=fsdp)
    each rank holds only its shard of every parameter between steps, so a direct call fails
    ("mat2 must be a matrix, got 1-D tensor"); gather them for the call (every rank takes part,
    as every rank runs the callbacks)."""
    model = getattr(trainer.strategy, "model", None)
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        if isinstance(model, FSDP):
            return FSDP.summon_full_params(model, writeback=False)
    return nullcontext()


def best_checkpoint_callback(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The ModelCheckpoint that keeps the best checkpoint by a metric (not the one of last.ckpt)."""
    return next((c for c in trainer.checkpoint_callbacks if c.monitor), None)


class AttentionFigures(pl.Callback):
    """After each validation epoch, draw the attention of a fixed probe batch (tag `attention/...`)
    into each logger that takes figures (TensorBoard, MLflow, W&B: tasks/loggers.py), and the
    predictor's `probe_texts` as text (translation: `translations/...`).

    The DataModule chooses the probe examples (`probe_batch`) and the predictor of its input kind
    draws the figure (`attnexp.predictors`), so one callback serves bags, reviews and pairs.
    """

    def __init__(self, num_examples: int = 8, every_n_epochs: int = 1) -> None:
        # 0 would end the run with a ZeroDivisionError after its first epoch (the command line
        # refuses it from the schema first, naming callbacks.<name>.*)
        POSITIVE.check("num_examples", num_examples)
        POSITIVE.check("every_n_epochs", every_n_epochs)
        self.num_examples = num_examples
        self.every_n_epochs = every_n_epochs

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        writers = figure_loggers(trainer)
        if trainer.sanity_checking or not writers or trainer.current_epoch % self.every_n_epochs:
            return
        datamodule = trainer.datamodule
        batch = datamodule.probe_batch(self.num_examples)
        if batch is None:
            return
        batch = {k: v.to(pl_module.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        predictor = predictor_for(datamodule)
        was_training = pl_module.training
        pl_module.eval()
        with torch.no_grad(), full_parameters(trainer):
            output = pl_module.model(**inputs, return_attention=True)
            # what the model makes of the probes in words (translation: its translations)
            texts = predictor.probe_texts(batch, pl_module)
        pl_module.train(was_training)
        figures = predictor.attention_figure(batch, output.logits, output.attention)
        if figures is not None and not isinstance(figures, dict):
            figures = {"attention/val_examples": figures}
        if not texts and not figures:
            return
        # At the step of the val/* points (Lightning's logger step), before the checkpoint's global
        # step: a resumed run's TensorBoard purge (tasks/loggers.py) hides what is at or after that.
        step = logger_step(trainer)
        for tag, text in texts.items():
            for writer in writers:
                log_text(writer, tag, text, step)
        for tag, figure in (figures or {}).items():
            for writer in writers:
                log_figure(writer, tag, figure, step)
            plt.close(figure)


class MovedRunCheckpoints(pl.Callback):
    """A run dir moved or copied since its last checkpoint: the checkpoint callbacks' saved state
    names files in the old dir. Before it is loaded, it is pointed at the same files in this run's
    dir, so a resumed run keeps its best checkpoint and score (Lightning would keep only the old
    best path, which no longer exists, or is another copy's)."""

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict
    ) -> None:
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key)
            old = state.get("dirpath") if state else None
            if old and callback.dirpath and old != callback.dirpath:
                log.info(
                    "this run's checkpoints were saved in %s; now in %s", old, callback.dirpath
                )
                states[callback.state_key] = moved_state(state, old, callback.dirpath)


def moved_state(state: dict, old_dir: str, new_dir: str) -> dict:
    """A ModelCheckpoint state with its paths under `old_dir` moved to `new_dir`."""

    def move(path: str) -> str:
        if not path or not Path(path).is_relative_to(old_dir):
            return path
        return str(Path(new_dir) / Path(path).relative_to(old_dir))

    moved = {**state, "dirpath": new_dir}
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        if key in moved:
            moved[key] = move(moved[key])
    if "best_k_models" in moved:
        moved["best_k_models"] = {move(k): v for k, v in moved["best_k_models"].items()}
    return moved


class EpochHistory(pl.Callback):
    """Appends each epoch's logged metrics to the run record, so reports can plot runs in flight.

    The task logs an epoch's train metrics in its own `on_train_epoch_end`, which Lightning calls
    after the callbacks' one, so the row of an epoch is written when the next epoch starts (or
    when training ends), once every metric of the epoch is in `callback_metrics`. Its val/* are
    those of the epoch's last validation; an epoch without one (`check_val_every_n_epoch`) gets
    no val/* in its row, not the last ones again.
    Every validation's val/* also go to the record's `validations`, with the global step: a
    checkpoint saved at a validation carries that step, so its validation metrics can be found.
    The task's notes on what its numbers measure go to the record's warnings as they are made.
    """

    def __init__(self, record) -> None:
        self.record = record
        self.pending: tuple[int, int] | None = None  # (epoch, global step) of an unwritten row

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._record_notes(pl_module)
        row = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        row.update(
            {
                k: float(v)
                for k, v in trainer.callback_metrics.items()
                if k.startswith("val/") and v.numel() == 1
            }
        )
        self.record.update(validations=[*self.record.data["validations"], row])

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint):
        """`best_ckpt` follows the best checkpoint while the run trains, so a run that fails later
        (or a resumed one whose new best replaced the earlier attempt's) still names its best.
        Lightning saves a new best before last.ckpt and deletes the one it replaces after it: a
        path is recorded once its file is there."""
        checkpoint = best_checkpoint_callback(trainer)
        best = checkpoint.best_model_path if checkpoint is not None else ""
        if best and Path(best).is_file() and trainer.is_global_zero:
            self.record.record_best(best)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._record_notes(pl_module)

    def _record_notes(self, pl_module: pl.LightningModule) -> None:
        """The task's notes on what its numbers measure (e.g. one class only), into the record
        here, in the process that evaluated: under ddp_spawn that is a worker, whose task the main
        process never sees (train.py reloads the record's warnings)."""
        for note in pl_module.notes:
            if note not in self.record.data["warnings"]:
                self.record.warn(note)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pending = (trainer.current_epoch, trainer.global_step)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write(trainer)
        if trainer.is_global_zero:
            self._record_early_stop(trainer)

    def _record_early_stop(self, trainer: pl.Trainer) -> None:
        """A run an EarlyStopping callback ended (callbacks=early_stopping) says so in its record:
        the epoch and step, and Lightning's reason."""
        for callback in trainer.early_stopping_callbacks:
            reason = callback.stopping_reason_message  # set when it stops the run
            if trainer.should_stop and reason:
                stop = {"epoch": callback.stopped_epoch, "step": trainer.global_step}
                self.record.update(stopped_early={**stop, "reason": reason})
                log.info("stopped early at epoch %d, step %d: %s", *stop.values(), reason)
                return

    def _write(self, trainer: pl.Trainer) -> None:
        pending, self.pending = self.pending, None
        if pending is None or not trainer.is_global_zero:  # DDP: one writer per run record
            return
        row = {"epoch": pending[0], "step": pending[1]}
        row.update(
            {
                k: float(v)
                for k, v in trainer.callback_metrics.items()
                if v.numel() == 1 and not k.startswith("val/")
            }
        )
        # val/* of the epoch's last validation, from the record: it may have run in an earlier
        # attempt of a resumed run (its checkpoint written there, mid-epoch)
        row.update(last_validation(self.record, epoch=pending[0]))
        # A resumed run finishes an epoch its earlier attempt ended (it was killed after the
        # epoch's last validation): what that attempt logged of the epoch stays, updated.
        earlier = [h for h in self.record.data["history"] if h["epoch"] == row["epoch"]]
        history = [h for h in self.record.data["history"] if h["epoch"] != row["epoch"]]
        self.record.update(history=[*history, {**(earlier[-1] if earlier else {}), **row}])


def last_validation(record, epoch: int | None = None) -> dict[str, float]:
    """val/* of the run's last validation (of `epoch` only, if given), from the record's
    `validations`, which keep those of a resumed run's earlier attempts; {} if none."""
    rows = [r for r in record.data["validations"] if epoch is None or r["epoch"] == epoch]
    return {k: v for k, v in rows[-1].items() if k.startswith("val/")} if rows else {}


class FiniteLosses(pl.Callback):
    """Ends a run whose loss turned NaN or infinite (its weights are then mostly no longer
    numbers, and testing them would record a meaningless accuracy). Checked once per validation
    and per epoch (from the logged values: no extra GPU sync per step)."""

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:  # the sanity check runs the untrained model
            self._check(trainer, "val/loss")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, "train/loss_epoch")  # the epoch before's, logged at its end

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, "train/loss_epoch")

    @staticmethod
    def _check(trainer: pl.Trainer, key: str) -> None:
        value = trainer.callback_metrics.get(key)
        if value is None or bool(torch.isfinite(value).all()):
            return
        precision = str(trainer.precision)
        if key.startswith("train/") and precision in ("16", "16-mixed"):
            return  # the gradient scaler skips a step whose loss overflowed: the weights are fine
        cause = (
            f"trainer.precision={precision} computes in float16, which under- and overflows: "
            f"use bf16-mixed or 32-true"
            if precision.startswith("16")
            else "lower optimizer.lr, or set trainer.gradient_clip_val"
        )
        raise ConfigError(
            f"{key} is {float(value)} at epoch {trainer.current_epoch}, step "
            f"{trainer.global_step}: training diverged ({cause})"
        )


class EndSpawnedProcessGroup(pl.Callback):
    """Under ddp_spawn (trainer=ddp_cpu, trainer=ddp) every stage runs in new rank processes that
    exit when it ends, and Lightning leaves their gloo process group standing (it destroys only
    NCCL groups, at exit). A rank that exits with its gloo group alive can abort during interpreter
    shutdown ("terminate called without an active exception": gloo's worker threads are torn down
    unjoined; pytorch/pytorch#65513, #190489), and the aborted rank fails the whole job. So the
    ranks end the group at the stage's teardown, after its last collective: all wait at a barrier (no rank leaves while a peer is still in a
    collective), then each destroys it.

    Ranks launched by a script (trainer.strategy=ddp, fsdp) keep their group for the next stage,
    and a single process has none: both are left alone.
    """

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        spawned = isinstance(trainer.strategy.launcher, _MultiProcessingLauncher)
        if spawned and torch.distributed.is_available() and torch.distributed.is_initialized():
            trainer.strategy.barrier("end_process_group")  # with device_ids under NCCL
            torch.distributed.destroy_process_group()
