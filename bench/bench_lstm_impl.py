"""The BiLSTM encoder's two ways of never reading padding, timed against each other.

    python bench/bench_lstm_impl.py --threads 1

`model.rnn_impl=packed` runs `pack_padded_sequence` (cuDNN's path on a GPU); `reversed` runs the
padded batch forward and each review reversed within its own length backward (the CPU default,
`auto`). Both give the same numbers (tests/modules/test_lstm_encoder.py). This times one
forward + backward pass of the seed model's encoder (embedding 128, hidden 128 per direction, one
layer) on batches of review lengths drawn up to `--length`, for each implementation, and for
reference a plain `nn.LSTM` over the padded batch (reads padding: fast, but not the same
numbers). The implementations take turns within each round, so drift of the machine's speed hits
them alike; the medians over rounds are reported.
"""

import argparse
import time

import benchkit
import torch

from attnexp.modules.lstm import LSTMEncoder

IMPLS = ("packed", "reversed", "padded")  # padded: nn.LSTM over the padding (not the same numbers)


def make_batch(batch_size: int, length: int, vocab: int, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 4, length + 1, (batch_size,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]  # (B, T)
    ids = torch.randint(2, vocab, (batch_size, length), generator=generator) * mask
    return ids, mask


def step_seconds(encoder: LSTMEncoder, impl: str, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """One forward + backward pass of the encoder with `impl`."""
    encoder.zero_grad(set_to_none=True)
    start = time.perf_counter()
    if impl == "padded":
        out, _ = encoder.lstm(encoder.embedding(ids))
    else:
        encoder.rnn_impl = impl
        out = encoder(ids, mask)
    out.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    benchkit.timing_args(parser, batches=3, warmup=1, rounds=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=200, help="the longest review, in tokens")
    args = parser.parse_args()
    benchkit.setup(args)
    torch.manual_seed(0)
    encoder = LSTMEncoder(vocab_size=30_000, embed_dim=128, hidden_size=128).train()
    batches = [
        make_batch(args.batch_size, args.length, 30_000, seed)
        for seed in range(args.warmup + args.batches)
    ]
    medians, seconds = benchkit.taking_turns(
        IMPLS,
        args.rounds,
        len(batches),
        args.warmup,
        lambda impl, i: step_seconds(encoder, impl, *batches[i]),
    )
    for impl in IMPLS:
        print(f"{impl:<9} {medians[impl]:8.3f} s per forward + backward (median of {args.rounds})")
    print(f"packed / reversed: {medians['packed'] / medians['reversed']:.1f}x")
    benchkit.write_result(
        args,
        {
            "batch_size": args.batch_size,
            "length": args.length,
            "rounds": args.rounds,
            "seconds_per_step": medians,
            "seconds_per_step_rounds": seconds,
            "packed_over_reversed": medians["packed"] / medians["reversed"],
        },
    )


if __name__ == "__main__":
    main()
