"""How long `python -m attnexp.explain` takes on IMDB reviews: each measure timed per review.

    python bench/bench_explain.py --threads 2                           # embedded sample
    python bench/bench_explain.py --threads 2 --data-dir <data_dir>     # IMDB's test reviews

A BiLSTM + dot attention (`lstm_attn` at the chapter's sizes: 128-d embeddings, 128 hidden per
direction; untrained: the cost does not depend on the weights) reads `--reviews` test reviews cut
to `--max-seq-len` tokens, in batches of `--batch-size` (explain's default 16; the test
loader's length-bucketed batches, taken in a random order), and each measure
of `attnexp.faithfulness` runs on them as explain runs it: gradient x input, integrated gradients
(`--ig-steps`), leave-one-out, permutation (20 shuffles), erasure (10 steps, each of the five
orders). Reported: seconds per measure and reviews/s over all of them.
"""

import argparse
import logging
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import benchkit  # noqa: E402
import torch  # noqa: E402

from attnexp.data.imdb import IMDBDataModule  # noqa: E402
from attnexp.faithfulness import Subject  # noqa: E402
from attnexp.faithfulness.attribution import (  # noqa: E402
    gradient_x_input,
    integrated_gradients,
    leave_one_out,
)
from attnexp.faithfulness.measures import erasure, permutation, random_order  # noqa: E402
from attnexp.models.lstm import LSTMAttention  # noqa: E402
from attnexp.modules import DotScorer  # noqa: E402

MEASURES = ("gradient_x_input", "integrated_gradients", "leave_one_out", "permutation", "erasure")


def measure_batch(subject: Subject, inputs: dict, args, generator, seconds: dict) -> None:
    """Each measure once on the batch, its time added to `seconds`."""
    with torch.no_grad():
        pred = subject.probabilities(inputs).argmax(dim=1)
    orders = {}
    for name in MEASURES:
        start = time.perf_counter()
        if name == "gradient_x_input":
            orders[name] = gradient_x_input(subject, inputs, pred)
        elif name == "integrated_gradients":
            orders[name] = integrated_gradients(subject, inputs, pred, args.ig_steps)
        elif name == "leave_one_out":
            orders[name] = leave_one_out(subject, inputs, pred)
        elif name == "permutation":
            permutation(subject, inputs, 20, generator)
        else:
            with torch.no_grad():
                attention = subject.attention(inputs)[1]
            for order in (attention, *orders.values(), random_order(inputs["mask"], generator)):
                erasure(subject, inputs, order, 10)
        seconds[name] += time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default=None, help="folder holding imdb/ (default: embedded sample)"
    )
    parser.add_argument("--reviews", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=256)
    parser.add_argument("--ig-steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    benchkit.setup(args)

    dm = IMDBDataModule(
        data_dir=args.data_dir or "/nonexistent",
        source="local" if args.data_dir else "sample",
        max_seq_len=args.max_seq_len,
        batch_size=args.batch_size,
    )
    dm.setup("fit")
    torch.manual_seed(0)
    model = LSTMAttention(dm.model_kwargs["vocab_size"], 2, scorer=DotScorer)
    subject = Subject(model, "tokens")
    generator = torch.Generator().manual_seed(0)
    seconds = dict.fromkeys(MEASURES, 0.0)
    reviews = tokens = 0
    batches = list(dm.test_dataloader())  # length-bucketed: taken in a random order
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0))
    for batch in (batches[i] for i in order):
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        measure_batch(subject, inputs, args, generator, seconds)
        reviews += len(batch["labels"])
        tokens += int(batch["mask"].sum())
        if reviews >= args.reviews:
            break
    total = sum(seconds.values())
    result = {
        "data_source": dm.source,
        "reviews": reviews,
        "mean_tokens": tokens / max(reviews, 1),
        "torch_threads": torch.get_num_threads(),
        "ig_steps": args.ig_steps,
        "batch_size": args.batch_size,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "total_s": round(total, 2),
        "reviews_per_s": reviews / total if total else None,
    }
    print(
        f"{reviews} reviews ({result['mean_tokens']:.0f} tokens on average), "
        f"{torch.get_num_threads()} threads: {total:.1f} s, {result['reviews_per_s']:.2f} reviews/s"
    )
    for name, value in seconds.items():
        print(f"  {name:<22} {value:8.1f} s")
    benchkit.write_result(args, result)


if __name__ == "__main__":
    main()
