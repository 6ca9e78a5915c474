"""Translation speed: training throughput of the runner (Lightning Trainer + TranslationTask) vs a
plain PyTorch loop, and decoding speed (greedy vs beam search, batched).

Training: both sides train the same seq2seq model (same init; the first `nmt_fra_eng` recipe's
sizes: word vocabulary, GRU, width 128, Bahdanau attention, input feeding, label smoothing 0.1,
clip 1.0, Adam 2e-3)
on the same length-bucketed en->fr batches, in the same process, in `--rounds` short paired rounds
(bench/benchkit.py). Reported: the median target tokens/s of each, and the median of the per-round
ratios (target >= 0.95) with its quartiles.

Decoding: the distinct test sources of the first `--decode-batches` test batches (each up to
`--decode-batch-size` pairs), translated greedily and with beam search (`--beam-size`, length
penalty 0.6) by the model as initialised (seed 0). Untrained, it rarely emits EOS, so both ways
run `--max-len` steps (the recipe's `decode.max_len`): the cost of translations of that length,
where a trained model stops at EOS sooner (a few training batches teach it to stop at once, which
would time nothing). The two take turns in `--decode-rounds` rounds; reported: median
sentences/s and the mean output length.

    python bench/bench_translation.py                          # embedded fra-eng sample
    python bench/bench_translation.py --data-dir <data_dir>    # <data_dir>/fra-eng/fra.txt
    python bench/bench_translation.py --device cuda --precision bf16-mixed
"""

import argparse
import json
import logging
import os
import statistics
from functools import partial

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import benchkit  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnexp.data.fra_eng import FraEngDataModule  # noqa: E402
from attnexp.data.translation_text import BOS_ID, EOS_ID, NEVER_EMITTED  # noqa: E402
from attnexp.models.seq2seq import Seq2Seq  # noqa: E402
from attnexp.modules import AdditiveScorer  # noqa: E402
from attnexp.modules.decoding import beam_search, greedy_decode  # noqa: E402
from attnexp.tasks.translation import MODEL_INPUTS, TranslationTask  # noqa: E402

LR, LABEL_SMOOTHING, CLIP, ALPHA = 2e-3, 0.1, 1.0, 0.6


def target_tokens(batch: dict) -> torch.Tensor:
    return batch["tgt_mask"].sum()


def make_model(dm: FraEngDataModule, args: argparse.Namespace, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    sizes = dm.model_kwargs
    return Seq2Seq(
        sizes["src_vocab_size"],
        sizes["tgt_vocab_size"],
        scorer=partial(AdditiveScorer),
        cell=args.cell,
        embed_dim=args.hidden,
        hidden_size=args.hidden,
        dropout=0.2,
        input_feeding=True,
    )


def runner_segment(dm: FraEngDataModule, args: argparse.Namespace) -> float:
    timer = benchkit.WindowTimer(args.warmup, count=target_tokens)
    task = TranslationTask(
        make_model(dm, args),
        dm.num_classes,
        optimizer=partial(torch.optim.Adam, lr=LR),
        label_smoothing=LABEL_SMOOTHING,
    )
    trainer = benchkit.bench_trainer(
        timer,
        **benchkit.trainer_device(args),
        limit_train_batches=args.warmup + args.batches,
        gradient_clip_val=CLIP,
    )
    trainer.fit(task, train_dataloaders=dm.train_dataloader())
    return timer.rate


def plain_segment(dm: FraEngDataModule, args: argparse.Namespace) -> float:
    model = make_model(dm, args).to(args.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    timed = benchkit.PlainWindow(args.warmup, args.batches, args.device, count=target_tokens)
    for batch in timed.window(
        dm.train_dataloader(), lambda batch: benchkit.to_device(batch, args.device)
    ):
        with benchkit.autocast(args):
            logits = model(**{k: batch[k] for k in MODEL_INPUTS}).logits  # (B, U, V)
            nll = F.cross_entropy(
                logits.flatten(0, 1),
                batch["tgt_out"].flatten(),
                reduction="none",
                label_smoothing=LABEL_SMOOTHING,
            )
            loss = (nll * batch["tgt_mask"].flatten()).sum() / batch["tgt_mask"].sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
    return timed.rate


def decode_batches(dm: FraEngDataModule, args: argparse.Namespace) -> list[tuple]:
    """(src_ids, src_mask) of the distinct sources of the first test batches, on the device."""
    batches = []
    for batch in dm.test_dataloader():
        rows = batch["decode"].nonzero().flatten()
        batches.append(tuple(batch[k][rows].to(args.device) for k in ("src_ids", "src_mask")))
        if len(batches) == args.decode_batches:
            break
    return batches


def decoding_speed(model: Seq2Seq, batches: list[tuple], args: argparse.Namespace) -> dict:
    """Greedy and beam search taking turns (reverse order every other round): the median over
    rounds of sentences/s over all `batches`, and the mean hypothesis length in tokens."""
    model.eval()
    ways = {
        "greedy": lambda ids, mask: greedy_decode(
            model, ids, mask, BOS_ID, EOS_ID, args.max_len, NEVER_EMITTED
        ),
        f"beam{args.beam_size}": lambda ids, mask: [
            n_best[0]
            for n_best in beam_search(
                model,
                ids,
                mask,
                BOS_ID,
                EOS_ID,
                args.max_len,
                args.beam_size,
                ALPHA,
                1,
                NEVER_EMITTED,
            )
        ],
    }
    names = list(ways)
    rates: dict[str, list[float]] = {name: [] for name in names}
    lengths: dict[str, float] = {}
    sentences = sum(len(ids) for ids, _ in batches)
    for round_ in range(args.decode_rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            start = benchkit.clock(args.device)
            with benchkit.autocast(args):
                hypotheses = [h for ids, mask in batches for h in ways[name](ids, mask)]
            rates[name].append(sentences / (benchkit.clock(args.device) - start))
            lengths[name] = statistics.mean(len(h.tokens) for h in hypotheses)
    return {
        "sentences": sentences,
        "max_len": args.max_len,
        **{f"{n}_sentences_per_s": round(statistics.median(rates[n]), 1) for n in names},
        **{f"{n}_sentences_per_s_rounds": [round(r, 1) for r in rates[n]] for n in names},
        **{f"{n}_mean_tokens": round(lengths[n], 2) for n in names},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default=None, help="folder holding fra-eng/ (default: embedded sample)"
    )
    benchkit.timing_args(parser, batches=20, warmup=3, rounds=10)
    parser.add_argument("--batch-size", type=int, default=128, help="training pairs per batch")
    parser.add_argument("--cell", default="gru", choices=["gru", "lstm"])
    parser.add_argument("--hidden", type=int, default=128, help="embedding and hidden size")
    parser.add_argument("--decode-batches", type=int, default=2, help="test batches decoded")
    parser.add_argument("--decode-rounds", type=int, default=3, help="greedy/beam turns")
    parser.add_argument("--decode-batch-size", type=int, default=256, help="pairs per test batch")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=20, help="longest translation, in tokens")
    benchkit.device_args(parser)
    parser.add_argument("--cache-dir", default=None, help="token-id cache (default: attnexp's)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    benchkit.setup(args)

    dm = FraEngDataModule(
        data_dir=args.data_dir or "/nonexistent",
        source="local" if args.data_dir else "sample",
        max_tokens=10,
        vocab_size=20000,  # conf/data/fra_eng.yaml
        lowercase=True,  # the word vocabularies the rows of docs/benchmarks.md trained with
        # the sample's 2,828 distinct sources cannot spare the full data's 1,000 + 2,000
        **({} if args.data_dir else {"val_sources": 200, "test_sources": 500}),
        batch_size=args.batch_size,
        eval_batch_size=args.decode_batch_size,
        cache_dir=args.cache_dir,
    )
    dm.setup("fit")  # every split
    timing = benchkit.paired_rounds(
        args.rounds,
        lambda: plain_segment(dm, args),
        lambda: runner_segment(dm, args),
        "target tokens/s",
    )
    model = make_model(dm, args).to(args.device)
    decoding = decoding_speed(model, decode_batches(dm, args), args)
    result = {
        "device": args.device if args.device != "cuda" else torch.cuda.get_device_name(),
        "torch_threads": torch.get_num_threads(),
        "precision": args.precision,
        "data_source": dm.source,
        "src_vocab_size": dm.model_kwargs["src_vocab_size"],
        "tgt_vocab_size": dm.model_kwargs["tgt_vocab_size"],
        "train_pairs": len(dm.datasets["train"]),
        "cell": args.cell,
        "hidden": args.hidden,
        "batch_size": args.batch_size,
        "timed_batches_per_segment": args.batches,
        **timing,
        "decoding": decoding,
    }
    print(benchkit.describe(timing, "target tokens/s"))
    beam = f"beam{args.beam_size}"
    print(
        f"decoding {decoding['sentences']} sentences: greedy "
        f"{decoding['greedy_sentences_per_s']:.1f}/s, beam {args.beam_size} "
        f"{decoding[f'{beam}_sentences_per_s']:.1f}/s"
    )
    print(json.dumps(result, indent=2))
    benchkit.write_result(args, result)


if __name__ == "__main__":
    main()
