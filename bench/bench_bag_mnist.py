"""Bag-MNIST training throughput (bags/s): the runner vs a plain PyTorch loop, same process.

    python bench/bench_bag_mnist.py --data-dir <data_dir>   # real MNIST from <data_dir>/mnist
    python bench/bench_bag_mnist.py                                 # default data/ or the sample
    python bench/bench_bag_mnist.py --device cuda --precision bf16-mixed

Both sides train the same BagAttention (MLP backbone, additive context attention, hidden 256) with
Adam (lr 1e-3) on bags of 3 from the same BagMNISTDataModule: fresh training bags drawn by the
DataModule's loader, normalised by its `on_after_batch_transfer`.
- runner: `pl.Trainer` + `ClassificationTask`, as in a real run minus its I/O: train metrics (acc,
  macro F1) are computed and logged, but no logger writes them, no checkpoint, no validation.
  `--full` adds a TensorBoard logger and ModelCheckpoint (save_last); the checkpoints are saved
  at the epoch's end, after the window closes, so it times the logging only.
  `--bare` swaps the task for a LightningModule that only returns the loss (no metrics, no
  logging): its ratio is the cost of Lightning's training loop alone.
- plain: for batch in loader: forward, cross-entropy, zero_grad, backward, step. With
  `--plain-metrics` it also updates the same train metrics (acc, macro F1, loss) every step and computes
  them at the end, so both sides do the same work and the ratio is the framework's own overhead.
  On both sides the window covers the batches only, not the work done once per epoch (see
  benchkit.WindowTimer).
Each segment times `--batches` batches after `--warmup` untimed ones. Runner and plain segments
are paired in `--rounds` short rounds (bench/benchkit.py): the result is the median of the per-round
ratios runner / plain, with its quartiles, which cancels the drift of a shared CPU's speed.
Read the ratio beside Lightning's fixed cost per step (bench/bench_overhead.py, which `make bench`
runs first): a plain step of t ms caps the ratio at t / (t + that cost). At batch 128 the bag step
is short, so the ratio stays below 0.97; the runner must add nothing measurable above that floor
(docs/benchmarks.md).
"""

import argparse
import tempfile

import benchkit
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.models.bag import BagAttention
from attnexp.modules import AdditiveScorer
from attnexp.tasks import ClassificationTask
from attnexp.tasks.metrics import ClassificationStats


def make_model(dm: BagMNISTDataModule, hidden: int) -> BagAttention:
    torch.manual_seed(0)
    return BagAttention(
        dm.num_classes,
        image_size=28,
        hidden_size=hidden,
        attention="context",
        scorer=AdditiveScorer,
        pooled_norm=True,  # as conf/model/bag_attn.yaml: the book's head (BatchNorm first)
    )


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def plain_loop(dm: BagMNISTDataModule, model: torch.nn.Module, args: argparse.Namespace) -> float:
    model.to(args.device).train()
    optimizer = adam(model.parameters())
    train_stats = (
        ClassificationStats(dm.num_classes).to(args.device) if args.plain_metrics else None
    )

    def prepare(batch: dict) -> dict:  # what Lightning does before on_train_batch_start
        return dm.on_after_batch_transfer(benchkit.to_device(batch, args.device), 0)

    timed = benchkit.PlainWindow(args.warmup, args.batches, args.device)
    for batch in timed.window(dm.train_dataloader(), prepare):
        with benchkit.autocast(args):
            logits = model(items=batch["items"], mask=batch["mask"]).logits
            loss = F.cross_entropy(logits, batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if train_stats is not None:
            train_stats.update(logits.detach(), batch["labels"], loss)
    if train_stats is not None:
        train_stats.compute()  # once per epoch: outside the window, as on the runner side
    return timed.rate


def runner(dm: BagMNISTDataModule, model: torch.nn.Module, args: argparse.Namespace) -> float:
    task = (
        benchkit.BareTask(model, adam)
        if args.bare
        else ClassificationTask(model, dm.num_classes, adam)
    )
    timer = benchkit.WindowTimer(args.warmup)
    out = tempfile.mkdtemp()
    extra = {}
    if args.full:
        extra = {
            "logger": TensorBoardLogger(out, name="tb", version=""),
            "callbacks": [timer, ModelCheckpoint(dirpath=f"{out}/checkpoints", save_last=True)],
        }
    trainer = benchkit.bench_trainer(
        timer,
        logger=extra.get("logger", False),
        enable_checkpointing=args.full,
        callbacks=extra.get("callbacks", [timer]),
        limit_train_batches=args.warmup + args.batches,
        **benchkit.trainer_device(args),
        log_every_n_steps=20,
        default_root_dir=out,
    )
    trainer.fit(task, datamodule=dm)
    return timer.rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data-dir", default="data", help="folder holding mnist/ (else the sample)"
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--full", action="store_true", help="runner with TensorBoard + checkpoints")
    parser.add_argument(
        "--plain-metrics", action="store_true", help="the plain loop computes the train metrics too"
    )
    benchkit.timing_args(parser, batches=30, warmup=5, rounds=20, bare=True)
    benchkit.device_args(parser)
    args = parser.parse_args()
    benchkit.setup(args)
    dm = BagMNISTDataModule(args.data_dir, batch_size=args.batch_size, bag_size=3)
    dm.setup("fit")

    timing = benchkit.paired_rounds(
        args.rounds,
        lambda: plain_loop(dm, make_model(dm, args.hidden), args),
        lambda: runner(dm, make_model(dm, args.hidden), args),
        "bags/s",
    )
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
        "device": args.device,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "batches": args.batches,
        **timing,
    }
    print(f"{results['runner']}: {benchkit.describe(timing, 'bags/s')}")
    benchkit.write_result(args, results)


if __name__ == "__main__":
    main()
