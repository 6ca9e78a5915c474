import contextlib
import functools
import math

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from attnexp.errors import ConfigError
from attnexp.models import ModelOutput
from attnexp.runs.record import RunRecord
from attnexp.tasks import ClassificationTask
from attnexp.tasks.callbacks import EpochHistory
from attnexp.tasks.metrics import ClassificationStats
from attnexp.tasks.optim import linear_warmup_decay


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.net(x))


def quiet_trainer(**settings) -> pl.Trainer:
    """A CPU Trainer that writes nothing and prints no progress or summary."""
    return pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **settings,
    )


def test_epoch_metrics_cover_every_batch():
    """Metrics are logged once per epoch but computed over all batches of every test set."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(4)]
    model = Linear()
    task = ClassificationTask(model, 3, torch.optim.Adam, test_set_names=["again"])
    trainer = quiet_trainer()
    loaders = [DataLoader(batches, batch_size=None), DataLoader(batches[:2], batch_size=None)]
    (main, extra) = trainer.test(task, dataloaders=loaders, verbose=False)
    with torch.no_grad():
        correct = [(model(b["x"]).logits.argmax(-1) == b["labels"]).float() for b in batches]
    assert abs(main["test/acc"] - torch.cat(correct).mean().item()) < 1e-6
    assert abs(extra["test/acc_again"] - torch.cat(correct[:2]).mean().item()) < 1e-6


def test_stats_match_torchmetrics():
    """acc, macro F1 (with a class that never occurs, and one predicted but never a label) and
    the batch-size-weighted mean loss."""
    from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

    torch.manual_seed(0)
    C = 5
    stats = ClassificationStats(C)
    acc, f1 = MulticlassAccuracy(C, average="micro"), MulticlassF1Score(C, average="macro")
    losses, sizes = [], []
    for size in (7, 16, 3):
        logits = torch.randn(size, C)
        logits[:, 4] = -10  # class 4: never predicted
        labels = torch.randint(0, 4, (size,))  # ... and never a label
        loss = torch.nn.functional.cross_entropy(logits, labels)
        stats.update(logits, labels, loss)
        acc.update(logits, labels)
        f1.update(logits, labels)
        losses.append(loss * size)
        sizes.append(size)
    values = stats.compute()
    assert torch.allclose(values["acc"], acc.compute())
    assert torch.allclose(values["f1"], f1.compute())
    assert torch.allclose(values["loss"], torch.stack(losses).sum() / sum(sizes))
    # class 2 is predicted once but is never a label: its F1 of 0 counts in the macro mean
    stats, f1 = ClassificationStats(3), MulticlassF1Score(3, average="macro")
    logits = torch.nn.functional.one_hot(torch.tensor([0, 2, 1, 1]), 3).float()
    labels = torch.tensor([0, 0, 1, 1])
    stats.update(logits, labels)
    f1.update(logits, labels)
    assert torch.allclose(stats.compute()["f1"], f1.compute())


def test_history_rows_hold_their_own_epoch(tmp_path):
    """Each epoch's history row carries that epoch's train metrics (logged after the callbacks'),
    and val/* only where the epoch validated; `validations` hold each validation's val/* at its
    step (how train.py finds the tested checkpoint's)."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(4)]
    task = ClassificationTask(Linear(), 3, lambda p: torch.optim.SGD(p, lr=0.5))
    record, seen = RunRecord(tmp_path, seed=0, overrides=[]), []
    record.start()

    class Spy(pl.Callback):  # the value Lightning hands to loggers at each epoch's end
        def on_train_epoch_start(self, trainer, pl_module):
            if "train/acc" in trainer.callback_metrics:
                seen.append(float(trainer.callback_metrics["train/acc"]))

    trainer = quiet_trainer(
        max_epochs=3,
        check_val_every_n_epoch=2,  # validates in epoch 1 only
        callbacks=[EpochHistory(record), Spy()],
        default_root_dir=tmp_path,
    )
    loader = DataLoader(batches, batch_size=None)
    trainer.fit(task, train_dataloaders=loader, val_dataloaders=loader)
    seen.append(float(trainer.callback_metrics["train/acc"]))
    rows = record.data["history"]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert [r["train/acc"] for r in rows] == seen
    assert len(set(seen)) > 1  # the model learns: a stale row would repeat a value
    assert ["val/acc" in r for r in rows] == [False, True, False]  # not the last val/* again
    (validation,) = record.data["validations"]  # the sanity check is not one
    assert validation["val/acc"] == rows[1]["val/acc"]
    assert {k for k in validation if not k.startswith("val/")} == {"epoch", "step"}
    assert (validation["epoch"], validation["step"]) == (1, 8)


def test_weight_decay_has_one_setting():
    """The parameter groups carry task.weight_decay, which would silently replace an
    optimizer.weight_decay: that one is refused, naming the setting to use."""
    adamw = functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.05)
    with pytest.raises(ConfigError, match=r"optimizer.weight_decay=0.05 .* task.weight_decay=0.05"):
        ClassificationTask(Linear(), 3, adamw)
    task = ClassificationTask(
        Linear(), 3, functools.partial(torch.optim.AdamW, lr=1e-3), weight_decay=0.05
    )
    groups = task.configure_optimizers().param_groups
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]
    # the weight matrix is decayed, the bias is not; without decay, one group (one loop per step)
    assert [[tuple(p.shape) for p in g["params"]] for g in groups] == [[(3, 4)], [(3,)]]
    task = ClassificationTask(Linear(), 3, functools.partial(torch.optim.AdamW, lr=1e-3))
    assert len(task.configure_optimizers().param_groups) == 1


def test_optimizer_and_schedule_settings_are_checked():
    # torch applies a negative decay from the parameter groups without a word
    with pytest.raises(ConfigError, match=r"task.weight_decay=-1 must be a number >= 0"):
        ClassificationTask(Linear(), 3, functools.partial(torch.optim.Adam), weight_decay=-1)
    # a quoted number (task.weight_decay="0.01") ended in a TypeError from the comparison
    with pytest.raises(ConfigError, match=r"task.weight_decay='0.01' must be a number >= 0"):
        ClassificationTask(Linear(), 3, functools.partial(torch.optim.Adam), weight_decay="0.01")
    # torch's own check stopped fit() with a traceback naming no setting
    sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=-1)
    with pytest.raises(ConfigError, match=r"optimizer: SGD refuses .*Invalid momentum value: -1"):
        ClassificationTask(Linear(), 3, sgd).configure_optimizers()
    # any decay but "linear" silently decayed along a cosine
    optimizer = torch.optim.SGD(Linear().parameters(), lr=0.1)
    with pytest.raises(ConfigError, match=r"scheduler.decay 'exp' is not one of linear, cosine"):
        linear_warmup_decay(optimizer, 10, decay="exp")
    with pytest.raises(ConfigError, match=r"scheduler.warmup_ratio=1.5 must be a share"):
        linear_warmup_decay(optimizer, 10, warmup_ratio=1.5)
    linear_warmup_decay(optimizer, 10, warmup_ratio=1)  # all warmup: a share, so allowed


@pytest.mark.parametrize(
    ("decay", "middle"), [("linear", 0.75), ("cosine", 0.5 * (1 + math.cos(math.pi / 4)))]
)
def test_schedule_warms_up_to_the_full_lr_then_decays_to_zero(decay, middle):
    """The lr of each of 10 steps (warmup_ratio=0.2: 2 steps), read from the optimizer as it
    steps: a schedule a step late, or one that never reaches the full lr, would go unseen."""
    optimizer = torch.optim.SGD(Linear().parameters(), lr=2.0)
    scheduler = linear_warmup_decay(optimizer, 10, warmup_ratio=0.2, decay=decay)
    lrs = []
    for _ in range(11):
        lrs.append(optimizer.param_groups[0]["lr"] / 2.0)
        optimizer.step()
        scheduler.step()
    assert lrs[:3] == [0.5, 1.0, 1.0]  # warmup ends at the full lr, where the decay starts
    assert lrs[4] == pytest.approx(middle)  # a quarter of the decay's 8 steps
    assert lrs[10] == pytest.approx(0.0) and lrs == sorted(lrs[:2]) + sorted(lrs[2:], reverse=True)


# ClassificationStats.update runs every training step: on CUDA it must not read values back to
# the host (torch.bincount does: the min and max of its input), or every step stalls.


def test_update_counts_like_bincount_without_calling_it(monkeypatch):
    torch.manual_seed(0)
    C, B = 10, 257
    logits, labels = torch.randn(B, C), torch.randint(0, C, (B,))
    expected = torch.bincount(labels * C + logits.argmax(-1), minlength=C * C).view(C, C)

    def no_bincount(*args, **kwargs):
        raise AssertionError("torch.bincount syncs with the host on CUDA")

    monkeypatch.setattr(torch, "bincount", no_bincount)
    stats = ClassificationStats(C)
    stats.update(logits[:100], labels[:100], torch.tensor(0.5))
    stats.update(logits[100:], labels[100:], torch.tensor(0.5))
    assert torch.equal(stats.confusion, expected)
    assert stats.compute()["acc"] == pytest.approx(expected.diagonal().sum().item() / B)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_update_does_not_sync_on_cuda():
    stats = ClassificationStats(10).cuda()
    logits = torch.randn(64, 10, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")
    loss = torch.tensor(0.3, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        stats.update(logits, labels, loss)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert int(stats.confusion.sum()) == 64


def test_a_note_repeated_each_validation_is_recorded_once(tmp_path):
    """A one-class validation set is noted at every validation: the record keeps it once."""
    torch.manual_seed(0)
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    one = DataLoader([{"x": torch.randn(5, 4), "labels": torch.full((5,), 2)}], batch_size=None)
    trainer = quiet_trainer(
        max_epochs=3, callbacks=[EpochHistory(record)], default_root_dir=tmp_path
    )
    trainer.fit(ClassificationTask(Linear(), 3, torch.optim.Adam), one, one)
    assert len(record.data["validations"]) == 3
    assert [w.split(":")[0] for w in record.data["warnings"]] == ["val"]


def test_an_evaluation_of_one_class_is_noted():
    """The first batches of a test set sorted by label hold one class: its accuracy is that
    class's recall, which a note says (the run's record keeps it); two classes need no note."""
    torch.manual_seed(0)
    trainer = quiet_trainer()
    one = [{"x": torch.randn(5, 4), "labels": torch.full((5,), 2)} for _ in range(2)]
    task = ClassificationTask(Linear(), 3, torch.optim.Adam)
    trainer.test(task, dataloaders=DataLoader(one, batch_size=None), verbose=False)
    assert task.notes == [
        "test: every example read for test/acc and test/f1 has label 2, so they measure that "
        "class only (trainer.limit_test_batches takes the first batches, and the data may be "
        "sorted by label)"
    ]
    two = [{"x": torch.randn(5, 4), "labels": torch.tensor([0, 1, 1, 0, 2])}]
    task = ClassificationTask(Linear(), 3, torch.optim.Adam, test_set_names=["bag9"])
    loaders = [DataLoader(two, batch_size=None), DataLoader(one, batch_size=None)]
    trainer.test(task, dataloaders=loaders, verbose=False)
    assert len(task.notes) == 1 and task.notes[0].startswith(
        "test: every example read for test/acc_bag9 has label 2, so it measures that class only"
    )


def test_the_schedule_steps_with_every_batch_across_the_whole_fit():
    """The scheduler is told fit's number of steps and stepped after each batch: 2 epochs of 4
    batches warm up over 2 steps (warmup_ratio=0.25), then decay linearly over the other 6."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(4)]
    lrs = []

    class LearningRates(pl.Callback):  # the lr each batch is trained with
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    task = ClassificationTask(
        Linear(),
        3,
        functools.partial(torch.optim.SGD, lr=1.0),
        scheduler=functools.partial(linear_warmup_decay, warmup_ratio=0.25),
    )
    trainer = quiet_trainer(max_epochs=2, callbacks=[LearningRates()])
    trainer.fit(task, DataLoader(batches, batch_size=None))
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def test_a_test_set_without_batches_logs_nothing():
    """A test set that yields no batch has no accuracy: none is logged for it (its 0/0 would
    read as a NaN accuracy beside the others), and the main test set's are its own."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.tensor([0, 1, 2, 0, 1])}]
    task = ClassificationTask(Linear(), 3, torch.optim.Adam, test_set_names=["empty"])
    loaders = [DataLoader(batches, batch_size=None), DataLoader([], batch_size=None)]
    trainer = quiet_trainer()
    trainer.test(task, dataloaders=loaders, verbose=False)
    assert sorted(trainer.callback_metrics) == ["test/acc", "test/f1", "test/loss"]


def test_the_sanity_check_before_training_is_not_noted():
    """Lightning validates a couple of batches before training: those being one class says
    nothing of the validation set (here its third batch holds the others), so no note."""
    torch.manual_seed(0)
    one = [{"x": torch.randn(5, 4), "labels": torch.full((5,), 2)} for _ in range(2)]
    val = [*one, {"x": torch.randn(5, 4), "labels": torch.tensor([0, 1, 2, 0, 1])}]
    task = ClassificationTask(Linear(), 3, torch.optim.Adam)
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=2)
    trainer.fit(task, DataLoader(one, batch_size=None), DataLoader(val, batch_size=None))
    assert task.notes == []


def test_fit_logs_each_stages_metrics_under_its_prefix():
    """train/loss_step every step; at each epoch's end train/{acc,f1,loss_epoch} and
    val/{acc,f1,loss}, computed over every batch of the epoch."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(3)]
    model = Linear()
    task = ClassificationTask(model, 3, lambda p: torch.optim.SGD(p, lr=0.0))  # weights stay
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0)
    loader = DataLoader(batches, batch_size=None)
    trainer.fit(task, loader, loader)
    assert sorted(trainer.callback_metrics) == [
        "train/acc",
        "train/f1",
        "train/loss_epoch",
        "train/loss_step",
        "val/acc",
        "val/f1",
        "val/loss",
    ]
    with torch.no_grad():
        logits = [model(b["x"]).logits for b in batches]
        labels = torch.cat([b["labels"] for b in batches])
        accuracy = (torch.cat(logits).argmax(-1) == labels).float().mean()
        losses = [
            torch.nn.functional.cross_entropy(x, b["labels"])
            for x, b in zip(logits, batches, strict=True)
        ]
    metrics = trainer.callback_metrics
    assert torch.allclose(metrics["val/acc"], accuracy) and torch.allclose(
        metrics["train/acc"], accuracy
    )
    assert torch.allclose(metrics["val/loss"], torch.stack(losses).mean())
    assert torch.allclose(metrics["train/loss_epoch"], torch.stack(losses).mean())
    assert torch.allclose(metrics["train/loss_step"], losses[-1])


class StopAt(pl.Callback):
    """Interrupts training as Ctrl-C would, when the global step reaches `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


def test_a_resume_from_an_epochs_last_validation_starts_the_next_epochs_metrics_empty(tmp_path):
    """last.ckpt written at the validation after an epoch's last batch comes before that epoch's
    end: the resumed run's next epoch logs train/* over its own batches only, as uninterrupted."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(3)]
    loader = DataLoader(batches, batch_size=None)

    def fit(root, stop_at=None, ckpt_path=None):
        torch.manual_seed(1)
        task = ClassificationTask(Linear(), 3, lambda p: torch.optim.SGD(p, lr=0.5))
        # as the runs' last.ckpt: written at each validation, which comes before the epoch's end
        checkpoint = ModelCheckpoint(dirpath=root, save_last=True, save_on_train_epoch_end=False)
        stop = [StopAt(stop_at)] if stop_at is not None else []
        trainer = pl.Trainer(
            max_epochs=2,
            num_sanity_val_steps=0,
            callbacks=[checkpoint, *stop],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
        )
        with contextlib.suppress(SystemExit):  # Lightning's answer to the KeyboardInterrupt
            trainer.fit(task, loader, loader, ckpt_path=ckpt_path)
        return {k: v for k, v in trainer.callback_metrics.items() if k.startswith("train/")}

    whole = fit(tmp_path / "whole")
    fit(tmp_path / "part", stop_at=3)  # the first step of epoch 1: last.ckpt is from step 3
    resumed = fit(tmp_path / "part", ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    assert sorted(resumed) == sorted(whole)
    for name in ("train/acc", "train/f1", "train/loss_epoch"):
        assert torch.equal(resumed[name], whole[name]), name
