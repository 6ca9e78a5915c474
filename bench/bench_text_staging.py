"""IMDB training through the runner's own DataModule, its batches pinned or not (on CUDA the
loaders pin them: `AttnDataModule.pins_memory`), in paired rounds.

    python bench/bench_text_staging.py --device cuda --out staging.json
    python bench/bench_text_staging.py --steps 2 --warmup 1 --rounds 2 --batch-size 8   # smoke

Each round fits the same model (BiLSTM + dot attention, hidden 128, batch 128, reviews cut at 256
tokens; the embedded sample or --data-dir's imdb/) for --warmup + --steps steps once with the
loaders as a run builds them (`pinned`: pinned on CUDA) and once with pinning off (`pageable`),
in alternating order; the rate is samples/s over each fit's training window
(sweepkit.TrainWindow: epoch ends left out). On the CPU both are the same loader.
"""

import argparse
import functools
import json
import statistics
from pathlib import Path

import benchkit
import sweepkit
import torch

from attnexp.data.imdb import IMDBDataModule
from attnexp.models.lstm import LSTMAttention
from attnexp.modules import DotScorer
from attnexp.tasks import ClassificationTask


def fit(dm: IMDBDataModule, pinned: bool, args) -> float:
    torch.manual_seed(0)
    model = LSTMAttention(dm.model_kwargs["vocab_size"], 2, scorer=DotScorer, embed_dim=128,
                          hidden_size=128)  # fmt: skip
    task = ClassificationTask(model, 2, functools.partial(torch.optim.Adam, lr=1e-3))
    window = sweepkit.TrainWindow(args.warmup, write=False)
    trainer = benchkit.bench_trainer(
        window, accelerator=args.device, devices=1, max_epochs=-1,
        max_steps=args.warmup + args.steps,
    )  # fmt: skip
    if pinned:  # the loaders as a run builds them
        vars(dm).pop("pins_memory", None)
    else:
        dm.pins_memory = lambda: False
    trainer.fit(task, datamodule=dm)
    return window.samples / window.seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--data-dir", default=None, help="folder holding imdb/")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-seq-len", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="JSON results")
    args = parser.parse_args()
    benchkit.setup(args)
    dm = IMDBDataModule(
        data_dir=args.data_dir or "/nonexistent", source="local" if args.data_dir else "sample",
        max_seq_len=args.max_seq_len, batch_size=args.batch_size, cache_dir=None,
    )  # fmt: skip
    dm.setup("fit")
    rates: dict[str, list[float]] = {"pinned": [], "pageable": []}
    for i in range(args.rounds):
        for name in ("pinned", "pageable") if i % 2 == 0 else ("pageable", "pinned"):
            rates[name].append(fit(dm, name == "pinned", args))
        print(f"round {i + 1}: pinned {rates['pinned'][-1]:.1f}, pageable "
              f"{rates['pageable'][-1]:.1f} reviews/s", flush=True)  # fmt: skip
    ratios = [p / q for p, q in zip(rates["pinned"], rates["pageable"], strict=True)]
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "CPU",
        "data_source": dm.source, "batch_size": args.batch_size, "steps": args.steps,
        "pinned_per_s": round(statistics.median(rates["pinned"]), 1),
        "pageable_per_s": round(statistics.median(rates["pageable"]), 1),
        "ratio_pinned_over_pageable": round(statistics.median(ratios), 3),
        "rounds": {name: [round(r, 1) for r in values] for name, values in rates.items()},
        "machine": args.machine,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
