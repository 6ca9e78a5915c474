"""Shared by the benches: runner-vs-plain timing in many short paired rounds, and their helpers.

On a shared CPU the same loop's speed drifts by up to ~20% within seconds (the plain bag-MNIST
loop ran 17.8 and 21.9 ms per step a few seconds apart). One long runner segment
against one long plain segment therefore compares two states of the machine. Here every round
times a short plain segment and a short runner segment back to back, alternating which goes
first: the round's ratio cancels drift slower than a round, the median over rounds drops rounds
hit by a burst of load, and the quartiles show what is left of the noise.
"""

import argparse
import contextlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from attnexp.runs.machine import describe_machine, machine_label
from attnexp.tasks.classification import split_batch


def clock(device: str = "cpu") -> float:
    """Seconds; on "cuda" it waits for queued GPU work first, so a window ends when its last
    kernel does."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def batch_size(batch: dict) -> int:
    """What a classification bench counts: samples (`labels`)."""
    return len(batch["labels"])


class WindowTimer(pl.Callback):
    """Rate of the training batches from batch `warmup` on, in `count(batch)` (samples by default)
    per second. A count that is a device tensor (target tokens, say) is summed on the device and
    read back once, when the window is closed, so counting adds no sync to a step.

    The window opens at that batch's start (after Lightning fetched it and moved it to the device,
    as PlainWindow's does) and closes when the last batch is done, before the epoch-end work (the
    task's metric computation, a checkpoint save): a segment is a few dozen batches of an epoch of
    hundreds, so a cost paid once per epoch would weigh ten times more here than in a real run.
    Lightning fetches one batch ahead, so the window holds one fetch fewer than the plain loop's
    (a bag batch: ~0.7 ms, ~0.2% of a 30-batch window): a bias in the runner's favour."""

    def __init__(
        self, warmup: int, count: Callable[[dict], int | torch.Tensor] = batch_size
    ) -> None:
        self.warmup, self.count, self.samples = warmup, count, 0
        self.start = self.end = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.warmup:
            self.start = clock(pl_module.device.type)
        if batch_idx >= self.warmup:
            self.samples = self.samples + self.count(batch)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.end = clock(pl_module.device.type)

    @property
    def rate(self) -> float:
        return float(self.samples) / (self.end - self.start)


def timing_args(
    parser: argparse.ArgumentParser, batches: int, warmup: int, rounds: int, bare: bool = False
) -> None:
    """The options every bench shares: segment length, rounds, torch threads, JSON output."""
    parser.add_argument("--batches", type=int, default=batches, help="timed batches per segment")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed batches before them")
    parser.add_argument("--rounds", type=int, default=rounds, help="paired runner/plain rounds")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    if bare:
        parser.add_argument(
            "--bare", action="store_true", help="runner side: a loss-only LightningModule"
        )


def device_args(parser: argparse.ArgumentParser) -> None:
    """Where both sides train, and in which precision (Lightning's names; the plain loop matches
    `bf16-mixed` with `torch.autocast`)."""
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])


def trainer_device(args: argparse.Namespace) -> dict:
    """The `bench_trainer` overrides that put the runner where `device_args` put the plain loop."""
    return {"accelerator": args.device, "devices": 1, "precision": args.precision}


def autocast(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """The plain loop's forward context: what Lightning's `bf16-mixed` wraps its forward in."""
    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")


def to_device(batch: dict, device: str) -> dict:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def setup(args: argparse.Namespace) -> None:
    if getattr(args, "device", "cpu") == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here; use --device cpu")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.machine = describe_machine()  # after the thread count is set: it is part of the record
    print(f"machine: {machine_label(args.machine)}", flush=True)


def write_result(args: argparse.Namespace, result: dict) -> None:
    """The results as JSON, with the machine that measured them (a ratio is that machine's)."""
    if args.out:
        result = {**result, "machine": args.machine}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def bench_trainer(timer: WindowTimer, **overrides) -> pl.Trainer:
    """A Trainer that only trains one epoch: no logger, checkpoint, progress bar, model summary or
    validation unless `overrides` asks for them."""
    settings = {
        "max_epochs": 1,
        "log_every_n_steps": 20,  # as conf/trainer/default.yaml
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
        "callbacks": [timer],
    }
    return pl.Trainer(**{**settings, **overrides})


class BareTask(pl.LightningModule):
    """The least a LightningModule can do: forward, cross-entropy, the given optimizer. Timing it
    against ClassificationTask separates Lightning's loop from the task's own per-step work."""

    def __init__(self, model: torch.nn.Module, optimizer: Callable) -> None:
        super().__init__()
        self.model, self.optimizer_factory = model, optimizer

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        inputs, labels = split_batch(batch)
        return F.cross_entropy(self.model(**inputs).logits, labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.model.parameters())


class PlainWindow:
    """The plain loop's side of WindowTimer: iterate `window(loader, prepare)` and train on each
    batch; `rate` is `count(batch)` (samples by default) per second over batches `warmup` ..
    `warmup + batches - 1`.

    The window opens once batch `warmup` is fetched and prepared (moved to the device, normalised)
    and closes when the last timed batch's step is done, without fetching another."""

    def __init__(
        self,
        warmup: int,
        batches: int,
        device: str = "cpu",
        count: Callable[[dict], int | torch.Tensor] = batch_size,
    ) -> None:
        self.warmup, self.batches, self.device, self.count = warmup, batches, device, count
        self.samples, self.start, self.end = 0, None, None

    def window(self, loader: Iterable, prepare: Callable[[dict], dict] = lambda b: b):
        for i, batch in enumerate(loader):
            batch = prepare(batch)
            if i == self.warmup:
                self.start = clock(self.device)
            yield batch
            if i >= self.warmup:
                self.samples = self.samples + self.count(batch)
            if i == self.warmup + self.batches - 1:
                break
        self.end = clock(self.device)  # also where a short loader ran out first

    @property
    def rate(self) -> float:
        return float(self.samples) / (self.end - self.start)


def paired_rounds(
    rounds: int, plain: Callable[[], float], runner: Callable[[], float], unit: str
) -> dict:
    """Run `rounds` rounds of (plain, runner) segments, each callable returning samples/s."""
    rates: dict[str, list[float]] = {"plain": [], "runner": []}
    sides = [("plain", plain), ("runner", runner)]
    for i in range(rounds):
        for name, segment in sides if i % 2 == 0 else sides[::-1]:
            rates[name].append(segment())
        print(
            f"round {i + 1}/{rounds}: plain {rates['plain'][-1]:8.1f}  runner "
            f"{rates['runner'][-1]:8.1f} {unit}  ratio {rates['runner'][-1] / rates['plain'][-1]:.3f}",
            flush=True,
        )
    return summarize(rates["plain"], rates["runner"])


def taking_turns(
    ways: Sequence[str], rounds: int, calls: int, warmup: int, seconds: Callable[[str, int], float]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(per way the median over rounds, per way one time per round): a round's time is the
    median of `seconds(way, i)` over calls i = warmup .. calls - 1 (the first `warmup` untimed).
    The ways take turns within each round, in reverse order every other round, so drift of the
    machine's speed hits them alike."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for round_ in range(rounds):
        for way in ways if round_ % 2 == 0 else ways[::-1]:
            calls_seconds = [seconds(way, i) for i in range(calls)]
            times[way].append(statistics.median(calls_seconds[warmup:]))
    return {way: statistics.median(values) for way, values in times.items()}, times


def summarize(plain: list[float], runner: list[float]) -> dict:
    """Medians of each side and of the per-round ratios runner / plain, with the ratios' quartiles."""
    ratios = [r / p for r, p in zip(runner, plain, strict=True)]
    # "inclusive": quartiles within the measured ratios (the default extrapolates beyond them)
    q1, _, q3 = (
        statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    )
    return {
        "rounds": len(ratios),
        "plain_per_s": statistics.median(plain),
        "runner_per_s": statistics.median(runner),
        "ratio_median": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
        "plain_per_s_rounds": [round(x, 1) for x in plain],
        "runner_per_s_rounds": [round(x, 1) for x in runner],
    }


def describe(result: dict, unit: str) -> str:
    return (
        f"median of {result['rounds']} rounds: plain {result['plain_per_s']:.1f}, runner "
        f"{result['runner_per_s']:.1f} {unit}; ratio runner/plain {result['ratio_median']:.3f} "
        f"(quartiles {result['ratio_q1']:.3f}-{result['ratio_q3']:.3f})"
    )
