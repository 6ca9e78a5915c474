"""Resuming from a mid-epoch last.ckpt (written at every validation, which `val_check_interval`
puts mid-epoch) trains on exactly the batches the uninterrupted run would have: none twice, none
left out, same order. val/acc never improves after the first validation, so last.ckpt is not the
best checkpoint."""

import pytest
import pytorch_lightning as pl
import torch
from conftest import CONF_DIR
from hydra.utils import instantiate
from imdb_data import write_imdb
from mnist_data import write_mnist
from omegaconf import OmegaConf

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.batching import bucketed_loader
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.resumable import ResumableLoader

BATCHES_PER_EPOCH = 9  # 36 training examples (or bags) in batches of 4


def imdb_data(root, num_workers=0):
    write_imdb(root / "data", num_train=40, num_test=8)
    return lambda: IMDBDataModule(
        num_workers=num_workers,
        data_dir=str(root / "data"),
        cache_dir=str(root / "cache"),
        vocab_size=200,
        min_frequency=1,
        max_seq_len=20,
        batch_size=4,
        pool_batches=2,
        val_fraction=0.1,
    )


def bag_data(root, shift=0):
    write_mnist(root / "data", 60, 20)
    return lambda: BagMNISTDataModule(
        data_dir=str(root / "data"),
        source="local",
        shift=shift,
        batch_size=4,
        num_train_bags=36,
        num_eval_bags=8,
        eval_bag_sizes=[],
        eval_variable_max=0,
    )


def fingerprint(batch) -> list[tuple]:
    """One tuple per example that tells it apart from the others."""
    if "items" in batch:
        return [tuple(bag.flatten()[::97].tolist()) for bag in batch["items"]]
    rows = zip(batch["input_ids"], batch["mask"], strict=True)
    return [tuple(ids[mask].tolist()) for ids, mask in rows]


class Recorder(pl.LightningModule):
    """Records what each training step saw; interrupted at global step `stop_at`."""

    def __init__(self, stop_at: int | None = None, sized_schedule: bool = False) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[tuple[int, list[tuple]]] = []
        self.stop_at = stop_at
        self.sized_schedule = sized_schedule

    def training_step(self, batch, batch_idx):
        if self.global_step == self.stop_at:
            raise KeyboardInterrupt  # as Ctrl-C: Lightning shuts down and exits
        self.seen.append((self.current_epoch, fingerprint(batch)))
        return self.w * 0

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", 0.5)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        if not self.sized_schedule:
            return optimizer
        # as the runs' schedules: sized from the trainer, which builds the training loader
        # before the checkpoint's training state is restored
        total = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def fit(make_data, root, stop_at=None, ckpt_path=None, sized_schedule=False) -> Recorder:
    module = Recorder(stop_at, sized_schedule)
    callbacks = OmegaConf.load(CONF_DIR / "callbacks" / "default.yaml")  # the runs' checkpoints
    checkpoints = [callbacks.model_checkpoint, callbacks.last_checkpoint]
    for cfg in checkpoints:
        cfg.dirpath = str(root / "checkpoints")
    trainer = pl.Trainer(
        max_epochs=2,
        val_check_interval=3,  # last.ckpt after steps 3, 6, 9 of each epoch
        callbacks=[instantiate(cfg) for cfg in checkpoints],
        default_root_dir=str(root),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    try:
        trainer.fit(module, datamodule=make_data(), ckpt_path=ckpt_path)
    except SystemExit:  # Lightning's answer to the KeyboardInterrupt
        assert stop_at is not None
    return module


def imdb_data_in_a_worker(root):
    return imdb_data(root, num_workers=1)  # the DataLoader reads its index sampler twice then


def shifted_bag_data(root):
    return bag_data(root, shift=2)  # the skipped batches' shifts are drawn too


@pytest.mark.parametrize(
    "data",
    [imdb_data, bag_data, imdb_data_in_a_worker, shifted_bag_data],
    ids=["text", "bags", "text-worker", "bags-shifted"],
)
@pytest.mark.parametrize("stop_at", [4, BATCHES_PER_EPOCH + 5], ids=["epoch0", "epoch1"])
def test_a_mid_epoch_resume_sees_what_the_uninterrupted_run_sees(tmp_path, data, stop_at):
    make_data = data(tmp_path)
    whole = fit(make_data, tmp_path / "whole").seen
    assert len(whole) == 2 * BATCHES_PER_EPOCH
    part = tmp_path / "part"
    before = fit(make_data, part, stop_at=stop_at).seen
    last = torch.load(part / "checkpoints" / "last.ckpt", weights_only=False)
    assert 0 < last["global_step"] % BATCHES_PER_EPOCH < BATCHES_PER_EPOCH  # mid-epoch
    after = fit(make_data, part, ckpt_path=str(part / "checkpoints" / "last.ckpt")).seen
    # the steps after the checkpoint and before the stop are trained again: as in any resume
    assert before[: last["global_step"]] + after == whole


@pytest.mark.parametrize("data", [imdb_data, bag_data], ids=["text", "bags"])
def test_a_mid_epoch_resume_with_a_schedule_sized_from_the_trainer(tmp_path, data):
    make_data = data(tmp_path)
    whole = fit(make_data, tmp_path / "whole", sized_schedule=True).seen
    part = tmp_path / "part"
    before = fit(make_data, part, stop_at=4, sized_schedule=True).seen
    last = torch.load(part / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 3  # mid-epoch
    ckpt = str(part / "checkpoints" / "last.ckpt")
    after = fit(make_data, part, ckpt_path=ckpt, sized_schedule=True).seen
    assert before[:3] + after == whole


def test_state_is_the_epoch_and_the_batches_handed_out():
    loader = ResumableLoader(list(range(10)), batch_size=3, seed=0)
    iterator = iter(loader)
    next(iterator), next(iterator)
    state = loader.state_dict()
    assert state == {"epoch": None, "batches": 2}
    next(iterator)
    assert state == {"epoch": None, "batches": 2}  # a copy: a saved state does not move on
    resumed = ResumableLoader(list(range(10)), batch_size=3, seed=0)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == [[6, 7, 8], [9]]  # the rest of that pass
    # counted from where it resumed: interrupted again, it would train on batches twice
    assert resumed.state_dict() == {"epoch": None, "batches": 4}
    assert len(list(resumed)) == 4  # once only: the next pass is whole
    resumed.load_state_dict({"epoch": None, "batches": 4})  # saved after the last batch
    assert len(list(resumed)) == 4


def test_a_checkpoint_from_an_earlier_epoch_skips_nothing():
    """An epoch cut short (trainer.limit_train_batches) saves fewer batches than the loader has;
    the run resumes in the next epoch, which must start at its first batch, not leave some out."""

    def loader():
        return bucketed_loader(
            list(range(12)), [1] * 12, 3, train=True, seed=0, collate_fn=list, num_workers=0
        )

    first = loader()
    iterator = iter(first)
    next(iterator), next(iterator)
    assert first.state_dict() == {"epoch": 0, "batches": 2}  # the epoch Lightning moves on
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    resumed.batch_sampler.sampler.set_epoch(1)
    served = [i for batch in resumed for i in batch]
    assert sorted(served) == list(range(12))


def test_loaders_draw_nothing_from_the_global_generator():
    """A resumed run restores the global random state at its first training batch, after its
    loaders started: one that drew its workers' base seed from the global generator would move
    the uninterrupted run's next dropout mask on to another."""
    train = ResumableLoader(list(range(10)), batch_size=3, seed=0)
    evaluation = bucketed_loader(
        list(range(10)), [1] * 10, 3, train=False, seed=0, collate_fn=torch.tensor, num_workers=0
    )
    state = torch.get_rng_state()
    for loader in (train, evaluation, train):
        assert sum(len(batch) for batch in loader) == 10
    assert torch.equal(torch.get_rng_state(), state)
