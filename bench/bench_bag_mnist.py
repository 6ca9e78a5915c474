"""Bag-MNIST training throughput (bags/s): the runner vs a plain PyTorch loop, same process.

    python bench/bench_bag_mnist.py --data-dir /work/shared/data   # real MNIST
    python bench/bench_bag_mnist.py                                 # default data/ or the sample

Both sides train the same BagAttention (MLP backbone, additive context attention, hidden 256) with
Adam (lr 1e-3) on bags of 3 from the same BagMNISTDataModule: fresh training bags drawn by the
DataModule's loader, normalised by its `on_after_batch_transfer`.
- runner: `pl.Trainer` + `ClassificationTask`, as in a real run minus its I/O: train metrics (acc,
  macro F1) are computed and logged, but no logger writes them, no checkpoint, no validation.
  `--full` adds what a real run adds: TensorBoard logger and ModelCheckpoint (save_last) at the end.
  `--bare` swaps the task for a LightningModule that only returns the loss (no metrics, no
  logging): its ratio is the cost of Lightning's training loop alone.
- plain: for batch in loader: forward, cross-entropy, zero_grad, backward, step. With
  `--plain-metrics` it also updates the same train metrics (acc, macro F1, loss) every step and computes
  them at the end, so both sides do the same work and the ratio is the framework's own overhead.
Each measurement times `--batches` batches after `--warmup` untimed ones; runner and plain loop
alternate `--repeats` times (taking turns at going first) and the best of each is kept. Both the
wall clock and the process's CPU time are reported: on a shared machine other processes' load
moves the wall clock, while CPU time (with --threads 1) counts only this process's work.
"""

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.models.bag import BagAttention
from attnexp.modules import AdditiveScorer
from attnexp.tasks import ClassificationTask
from attnexp.tasks.classification import split_batch
from attnexp.tasks.metrics import ClassificationStats


def make_model(dm: BagMNISTDataModule, hidden: int) -> BagAttention:
    torch.manual_seed(0)
    return BagAttention(
        dm.num_classes,
        image_size=28,
        hidden_size=hidden,
        attention="context",
        scorer=AdditiveScorer,
    )


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def clocks() -> tuple[float, float]:
    """(wall, CPU time of this process): on a shared machine the CPU time is the steadier measure."""
    return time.perf_counter(), time.process_time()


def rates(bags: int, start: tuple[float, float], end: tuple[float, float]) -> tuple[float, float]:
    """bags/s by the wall clock and per CPU second."""
    return bags / (end[0] - start[0]), bags / (end[1] - start[1])


def plain_loop(
    dm: BagMNISTDataModule, model: torch.nn.Module, batches: int, warmup: int, metrics: bool
) -> tuple[float, float]:
    optimizer = adam(model.parameters())
    train_stats = ClassificationStats(dm.num_classes) if metrics else None
    model.train()
    bags, start = 0, None
    for i, batch in enumerate(dm.train_dataloader()):
        if i == warmup + batches:
            break
        if i == warmup:
            start = clocks()
        batch = dm.on_after_batch_transfer(batch, 0)
        logits = model(items=batch["items"], mask=batch["mask"])
        loss = F.cross_entropy(logits, batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if train_stats is not None:
            train_stats.update(logits.detach(), batch["labels"], loss)
        bags += len(batch["labels"]) if i >= warmup else 0
    if train_stats is not None:
        train_stats.compute()
    return rates(bags, start, clocks())


class Timer(pl.Callback):
    """From the start of batch `warmup` to the end of the epoch (metrics computed there too)."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.end, self.bags = warmup, None, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.warmup:
            self.start = clocks()
        if batch_idx >= self.warmup:
            self.bags += len(batch["labels"])

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.end = clocks()


class BareTask(pl.LightningModule):
    """The least a LightningModule can do: forward, cross-entropy, the same optimizer."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        inputs, labels = split_batch(batch)
        return F.cross_entropy(self.model(**inputs), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return adam(self.model.parameters())


def runner(
    dm: BagMNISTDataModule,
    model: torch.nn.Module,
    batches: int,
    warmup: int,
    full: bool,
    bare: bool = False,
) -> float:
    task = BareTask(model) if bare else ClassificationTask(model, dm.num_classes, adam)
    timer = Timer(warmup)
    out = tempfile.mkdtemp()
    extra = {}
    if full:
        extra = {
            "logger": TensorBoardLogger(out, name="tb", version=""),
            "callbacks": [timer, ModelCheckpoint(dirpath=f"{out}/checkpoints", save_last=True)],
        }
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=extra.get("logger", False),
        enable_checkpointing=full,
        callbacks=extra.get("callbacks", [timer]),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        limit_train_batches=warmup + batches,
        log_every_n_steps=20,
        default_root_dir=out,
    )
    trainer.fit(task, datamodule=dm)
    return rates(timer.bags, timer.start, timer.end)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data-dir", default="data", help="folder holding mnist/ (else the sample)"
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="runner with TensorBoard + checkpoints")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument(
        "--plain-metrics", action="store_true", help="the plain loop computes the train metrics too"
    )
    parser.add_argument(
        "--bare", action="store_true", help="runner side: a loss-only LightningModule (no metrics)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    dm = BagMNISTDataModule(args.data_dir, batch_size=args.batch_size, bag_size=3)
    dm.setup("fit")
    plain, run = [], []
    for i in range(args.repeats):  # alternate which side goes first
        sides = [("plain", plain), ("runner", run)]
        for name, results in sides if i % 2 == 0 else sides[::-1]:
            model = make_model(dm, args.hidden)
            if name == "plain":
                results.append(plain_loop(dm, model, args.batches, args.warmup, args.plain_metrics))
            else:
                results.append(runner(dm, model, args.batches, args.warmup, args.full, args.bare))
        print(
            f"plain {plain[-1][0]:7.1f} bags/s ({plain[-1][1]:7.1f} per CPU s)   runner "
            f"{run[-1][0]:7.1f} bags/s ({run[-1][1]:7.1f} per CPU s)",
            flush=True,
        )
    best = {
        side: [max(r[k] for r in results) for k in (0, 1)]
        for side, results in (("plain", plain), ("runner", run))
    }
    results = {
        "data_source": dm.source,
        "runner": ("bare LightningModule, " if args.bare else "ClassificationTask, ")
        + (
            "full (TensorBoard + checkpoints)"
            if args.full
            else "minimal (no logger, no checkpoint)"
        ),
        "plain_metrics": args.plain_metrics,
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "batches": args.batches,
        "repeats": args.repeats,
        "plain_bags_s": best["plain"][0],
        "runner_bags_s": best["runner"][0],
        "ratio_wall": best["runner"][0] / best["plain"][0],
        "plain_bags_per_cpu_s": best["plain"][1],
        "runner_bags_per_cpu_s": best["runner"][1],
        "ratio_cpu": best["runner"][1] / best["plain"][1],
    }
    print(
        f"best of {args.repeats} ({results['runner']}): wall clock plain {results['plain_bags_s']:.1f}, "
        f"runner {results['runner_bags_s']:.1f} bags/s, ratio {results['ratio_wall']:.3f}; "
        f"CPU time plain {results['plain_bags_per_cpu_s']:.1f}, runner "
        f"{results['runner_bags_per_cpu_s']:.1f} bags/CPU s, ratio {results['ratio_cpu']:.3f}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
