"""Which words a trained text run's attention picks out, over a whole split of its data.

    python docs/analysis/attention_words.py outputs/runs/<run> [--split test] [--top 12]

For each view of the run's attention (`pooling` for lstm_attn; `head0`, `head1`, ... for
lstm_mhsa, where a token's weight is the attention it receives, averaged over the queries: what
predict's HTML page shades) it reads every review of the split with the run's best checkpoint, as
evaluate takes it, and prints:
- peak: a review's largest weight as a multiple of uniform (n x max weight), averaged;
- entropy: a review's entropy of the weights over log n (1: uniform, 0: all on one token),
  averaged over the reviews of more than one token;
- the words with the largest mean weight relative to uniform (n x weight, averaged over the
  word's occurrences), among the words read at least --min-count times.
The data are read from the run's own data dir and tokenized with its tokenizer.
"""

import argparse
import math

import torch

from attnexp.runner.build import build
from attnexp.runner.load import load_run, load_weights, read_weights
from attnexp.viz.text import token_weights


@torch.no_grad()
def attention_words(run: str, split: str = "test", max_batches: int | None = None):
    """(tokenizer, {view: {"reviews", "peak", "entropy", "mass", "relative", "count"}}): per
    view, the sums over the split's reviews, and per token id the sum of n x weight and the
    number of times it was read (`relative`, `count`: tensors over the vocabulary)."""
    cfg, choices, run_dir, ckpt = load_run(run)
    datamodule, task = build(cfg, choices, artifacts_dir=str(run_dir))
    load_weights(task, ckpt, read_weights(ckpt))
    model = task.model.eval()
    loader = {"train": datamodule.train_dataloader, "val": datamodule.val_dataloader}.get(
        split, datamodule.test_dataloader
    )()
    vocab = datamodule.tokenizer.get_vocab_size()
    views: dict[str, dict] = {}
    for i, batch in enumerate(loader):
        if max_batches is not None and i == max_batches:
            break
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        attention = model(**inputs, return_attention=True).attention
        if not isinstance(attention, torch.Tensor):
            raise SystemExit(f"{run}: its model returns no per-token attention to count")
        ids, mask = batch["input_ids"], batch["mask"]
        n = mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
        for view, weights in token_weights(attention, mask).items():
            totals = views.setdefault(
                view,
                {
                    "reviews": 0,
                    "longer": 0,
                    "peak": 0.0,
                    "entropy": 0.0,
                    "mass": 0.0,
                    "relative": torch.zeros(vocab, dtype=torch.float64),
                    "count": torch.zeros(vocab, dtype=torch.long),
                },
            )
            relative = weights * n  # 1 = uniform
            totals["reviews"] += len(ids)
            totals["peak"] += relative.max(-1).values.sum().item()
            totals["mass"] += weights.sum().item()
            plogp = (weights * weights.clamp(min=1e-12).log()).sum(-1)
            longer = n.squeeze(-1) > 1
            totals["longer"] += int(longer.sum())
            totals["entropy"] += (-plogp[longer] / n.squeeze(-1)[longer].log()).sum().item()
            totals["relative"].index_add_(0, ids[mask], relative[mask].double())
            totals["count"].index_add_(0, ids[mask], torch.ones_like(ids[mask]))
    return datamodule.tokenizer, views


def top_words(totals: dict, tokenizer, top: int, min_count: int) -> list[tuple[str, float, int]]:
    """(word, mean n x weight, times read) of the `top` words read at least `min_count` times."""
    count = totals["count"]
    mean = torch.where(count >= min_count, totals["relative"] / count.clamp(min=1), -math.inf)
    best = mean.argsort(descending=True)[:top]
    return [
        (tokenizer.id_to_token(int(t)), float(mean[t]), int(count[t]))
        for t in best
        if mean[t] > -math.inf
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run dirs (or checkpoints) of text runs")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--min-count", type=int, default=100)
    args = parser.parse_args()
    for run in args.runs:
        print(run)
        tokenizer, views = attention_words(run, args.split)
        for view, totals in views.items():
            words = top_words(totals, tokenizer, args.top, args.min_count)
            print(
                f"  {view}: {totals['reviews']} reviews, peak {totals['peak'] / totals['reviews']:.2f}x "
                f"uniform, entropy/log n {totals['entropy'] / max(1, totals['longer']):.3f}"
            )
            print("    " + ", ".join(f"{w} {m:.3f} ({c})" for w, m, c in words))


if __name__ == "__main__":
    main()
