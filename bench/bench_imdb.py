"""IMDB throughput: the runner (Lightning Trainer + ClassificationTask) vs a plain PyTorch loop.

Both train the same model (same init) on the same length-bucketed batches, in the same process.
Runner and plain segments are paired in `--rounds` short rounds (bench/benchkit.py), so that load
from other processes hits both alike. Reported: the median reviews/s of each and the median of
the per-round ratios (target >= 0.97) with its quartiles, plus tokenisation throughput.

    python bench/bench_imdb.py                                   # embedded sample
    python bench/bench_imdb.py --data-dir <data_dir>      # full IMDB from <data_dir>/imdb
    python bench/bench_imdb.py --device cuda --precision bf16-mixed
"""

import argparse
import json
import logging
import os
import tempfile
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import benchkit  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from datasets import Dataset  # noqa: E402

from attnexp.data.imdb import IMDBDataModule  # noqa: E402
from attnexp.data.text import encode_texts, tokenize_dataset, train_word_tokenizer  # noqa: E402
from attnexp.models.lstm import LSTMAttention  # noqa: E402
from attnexp.modules import DotScorer  # noqa: E402
from attnexp.tasks import ClassificationTask  # noqa: E402


def make_model(vocab_size: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return LSTMAttention(vocab_size, 2, scorer=DotScorer, embed_dim=128, hidden_size=128)


def runner_segment(dm, vocab_size, batches, warmup, args) -> float:
    timer = benchkit.WindowTimer(warmup)
    task = ClassificationTask(
        make_model(vocab_size, 0), 2, optimizer=partial(torch.optim.Adam, lr=1e-3)
    )
    trainer = benchkit.bench_trainer(
        timer, **benchkit.trainer_device(args), limit_train_batches=warmup + batches
    )
    trainer.fit(task, train_dataloaders=dm.train_dataloader())
    return timer.rate


def plain_segment(dm, vocab_size, batches, warmup, args) -> float:
    model = make_model(vocab_size, 0).to(args.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    timed = benchkit.PlainWindow(warmup, batches, args.device)
    for batch in timed.window(
        dm.train_dataloader(), lambda batch: benchkit.to_device(batch, args.device)
    ):
        with benchkit.autocast(args):
            logits = model(batch["input_ids"], batch["mask"]).logits
            loss = F.cross_entropy(logits, batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return timed.rate


def tokenization_throughput(texts: list[str], max_seq_len: int) -> dict:
    """Tokenizer training, bare encoding, and what a run pays: the `datasets.map` pass writing the
    token-id cache (first run) and reading it back (every later run)."""
    start = time.perf_counter()
    tokenizer = train_word_tokenizer(texts, vocab_size=30000, min_frequency=2)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    ids = encode_texts(tokenizer, texts, max_seq_len)
    encode_s = time.perf_counter() - start
    tokens = sum(len(x) for x in ids)
    with tempfile.TemporaryDirectory() as cache_dir:
        cache = Path(cache_dir) / "train.arrow"
        timed = {}
        for run in ("cold", "warm"):  # warm: the cache file written by the cold pass
            start = time.perf_counter()
            tokenize_dataset(Dataset.from_dict({"text": texts}), tokenizer, max_seq_len, cache)
            timed[run] = time.perf_counter() - start
    return {
        "texts": len(texts),
        "max_seq_len": max_seq_len,
        "train_tokenizer_s": round(train_s, 2),
        "encode_reviews_per_s": round(len(texts) / encode_s),
        "encode_tokens_per_s": round(tokens / encode_s),
        "map_to_cache_s": round(timed["cold"], 2),
        "cache_hit_s": round(timed["warm"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default=None, help="folder holding imdb/ (default: embedded sample)"
    )
    benchkit.timing_args(parser, batches=8, warmup=2, rounds=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-seq-len", type=int, default=256)
    benchkit.device_args(parser)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    benchkit.setup(args)

    dm = IMDBDataModule(
        data_dir=args.data_dir or "/nonexistent",
        source="local" if args.data_dir else "sample",
        max_seq_len=args.max_seq_len,
        batch_size=args.batch_size,
        cache_dir=args.cache_dir,
    )
    raw = dm.load_local(Path(args.data_dir) / "imdb") if args.data_dir else dm.load_sample()
    tokenization = tokenization_throughput(raw["train"]["text"], args.max_seq_len)
    dm.setup("fit")
    vocab_size = dm.model_kwargs["vocab_size"]
    timing = benchkit.paired_rounds(
        args.rounds,
        lambda: plain_segment(dm, vocab_size, args.batches, args.warmup, args),
        lambda: runner_segment(dm, vocab_size, args.batches, args.warmup, args),
        "reviews/s",
    )
    result = {
        "device": args.device if args.device != "cuda" else torch.cuda.get_device_name(),
        "torch_threads": torch.get_num_threads(),
        "precision": args.precision,
        "data_source": dm.source,
        "batch_size": args.batch_size,
        "timed_batches_per_segment": args.batches,
        **timing,
        "tokenization": tokenization,
    }
    print(benchkit.describe(timing, "reviews/s"))
    print(json.dumps(result, indent=2))
    benchkit.write_result(args, result)


if __name__ == "__main__":
    main()
