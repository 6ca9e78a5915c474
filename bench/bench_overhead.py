"""Lightning's fixed cost per training step: a near-empty model, the runner vs a plain loop.

    python bench/bench_overhead.py --threads 1

A 16 -> 2 linear layer on pre-built batches of 8 makes the model's own work tiny, so the
difference in time per step between the runner (Trainer + ClassificationTask, no logger, no
checkpoint; `--bare`: a loss-only LightningModule instead) and a plain PyTorch loop over the same DataLoader is the framework's per-step cost
(hooks, optimizer closure, progress tracking, batch transfer). With it, a model whose plain step
takes t seconds can reach at most a runner/plain ratio of t / (t + overhead): this is what caps
the bag-MNIST bench on a slow CPU. Runner and plain segments are paired in short rounds
(bench/paired.py).
"""

import argparse
import json
import logging
import statistics
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from paired import BareTask, WindowTimer, clock, describe, paired_rounds
from torch import nn
from torch.utils.data import DataLoader

from attnexp.tasks import ClassificationTask


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def make_batches(n: int) -> list[dict]:
    torch.manual_seed(0)
    return [{"x": torch.randn(8, 16), "labels": torch.randint(0, 2, (8,))} for _ in range(n)]


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def plain(batches: list[dict], warmup: int) -> float:
    torch.manual_seed(0)
    model, samples = Linear(), 0
    optimizer = adam(model.parameters())
    for i, batch in enumerate(DataLoader(batches, batch_size=None)):
        if i == warmup:
            start = clock()
        loss = F.cross_entropy(model(batch["x"]), batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        samples += len(batch["labels"]) if i >= warmup else 0
    return samples / (clock() - start)


def runner(batches: list[dict], warmup: int, bare: bool) -> float:
    torch.manual_seed(0)
    timer = WindowTimer(warmup)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        callbacks=[timer],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    task = BareTask(Linear(), adam) if bare else ClassificationTask(Linear(), 2, adam)
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    return timer.rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=300, help="timed steps per segment")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10, help="paired runner/plain rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--bare", action="store_true", help="runner side: a loss-only LightningModule (no metrics)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    batches = make_batches(args.warmup + args.batches)
    timing = paired_rounds(
        args.rounds,
        lambda: plain(batches, args.warmup),
        lambda: runner(batches, args.warmup, args.bare),
        "samples/s",
    )
    # Per-round step times (8 samples per step), then the median per-step difference.
    step_us = {
        side: [8e6 / rate for rate in timing[f"{side}_per_s_rounds"]]
        for side in ("plain", "runner")
    }
    overhead = [r - p for r, p in zip(step_us["runner"], step_us["plain"], strict=True)]
    result = {
        "runner": "bare LightningModule" if args.bare else "ClassificationTask",
        "threads": torch.get_num_threads(),
        "steps_per_segment": args.batches,
        "plain_us_per_step": statistics.median(step_us["plain"]),
        "runner_us_per_step": statistics.median(step_us["runner"]),
        "overhead_us_per_step": statistics.median(overhead),
        **timing,
    }
    print(describe(timing, "samples/s"))
    print(
        f"per step: plain {result['plain_us_per_step']:.0f} us, runner "
        f"{result['runner_us_per_step']:.0f} us; Lightning's fixed cost "
        f"{result['overhead_us_per_step']:.0f} us per step (median of the rounds)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
