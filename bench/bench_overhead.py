"""Lightning's fixed cost per training step: a near-empty model, the runner vs a plain loop.

    python bench/bench_overhead.py --threads 1

A 16 -> 2 linear layer on pre-built batches of 8 makes the model's own work tiny, so the
difference in time per step between the runner (Trainer + ClassificationTask, no logger, no
checkpoint; `--bare`: a loss-only LightningModule instead) and a plain PyTorch loop over the same DataLoader is the framework's per-step cost
(hooks, optimizer closure, progress tracking, batch transfer). With it, a model whose plain step
takes t seconds can reach at most a runner/plain ratio of t / (t + overhead): this is what caps
the bag-MNIST bench on a slow CPU. Runner and plain segments are paired in short rounds
(bench/benchkit.py).
"""

import argparse
import statistics

import benchkit
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from attnexp.models import ModelOutput
from attnexp.tasks import ClassificationTask


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.layer(x))


def make_batches(n: int) -> list[dict]:
    torch.manual_seed(0)
    return [{"x": torch.randn(8, 16), "labels": torch.randint(0, 2, (8,))} for _ in range(n)]


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def plain(batches: list[dict], warmup: int) -> float:
    torch.manual_seed(0)
    model = Linear()
    optimizer = adam(model.parameters())
    timed = benchkit.PlainWindow(warmup, len(batches) - warmup)
    for batch in timed.window(DataLoader(batches, batch_size=None)):
        loss = F.cross_entropy(model(batch["x"]).logits, batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return timed.rate


def runner(batches: list[dict], warmup: int, bare: bool) -> float:
    torch.manual_seed(0)
    timer = benchkit.WindowTimer(warmup)
    trainer = benchkit.bench_trainer(timer)
    task = benchkit.BareTask(Linear(), adam) if bare else ClassificationTask(Linear(), 2, adam)
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    return timer.rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    benchkit.timing_args(parser, batches=300, warmup=20, rounds=10, bare=True)
    args = parser.parse_args()
    benchkit.setup(args)
    batches = make_batches(args.warmup + args.batches)
    timing = benchkit.paired_rounds(
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
    print(benchkit.describe(timing, "samples/s"))
    print(
        f"per step: plain {result['plain_us_per_step']:.0f} us, runner "
        f"{result['runner_us_per_step']:.0f} us; Lightning's fixed cost "
        f"{result['overhead_us_per_step']:.0f} us per step (median of the rounds)"
    )
    benchkit.write_result(args, result)


if __name__ == "__main__":
    main()
