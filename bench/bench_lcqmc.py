"""LCQMC training throughput (pairs/s): the runner (Lightning ClassificationTask) vs a plain PyTorch
loop over the same model and the same batches, in the same process; custom vs torch encoder blocks;
custom blocks with and without F.scaled_dot_product_attention.

    python bench/bench_lcqmc.py --data-dir <data_dir>      # real pairs (reduced protocol)
    python bench/bench_lcqmc.py                                    # generated pairs, anywhere
    python bench/bench_lcqmc.py --device cuda --precision bf16-mixed

Each segment trains `--batches` batches (after `--warmup` untimed ones); runner and plain segments
are paired in `--rounds` short rounds and the median of the per-round ratios is reported with its
quartiles (bench/benchkit.py), which cancels the drift of a shared CPU's speed.
"""

import argparse
import random
import tempfile
from pathlib import Path

import benchkit
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from attnexp.data.lcqmc import LCQMCDataModule
from attnexp.models.transformer import TransformerMatcher
from attnexp.tasks import ClassificationTask
from attnexp.tasks.classification import split_batch
from attnexp.tasks.optim import linear_warmup_decay, param_groups

CHARS = "电脑怎么录像如何在计算机上视频手机充电为什么不能用哪里可以买到好吃的苹果天气明会下雨"


def generated_data(folder: Path, n: int = 2000) -> Path:
    rng = random.Random(0)
    (folder / "lcqmc").mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        rows = []
        for i in range(n):
            a = "".join(rng.choices(CHARS, k=rng.randint(6, 14)))
            rows.append(f"{a}\t{a[::-1] if i % 2 else ''.join(rng.sample(CHARS, 10))}\t{i % 2}\n")
        (folder / "lcqmc" / f"{split}.tsv").write_text("".join(rows), encoding="utf-8")
    return folder


def make_model(kwargs: dict, variant: dict) -> TransformerMatcher:
    torch.manual_seed(0)
    return TransformerMatcher(**kwargs, **variant)


def optimizer_for(model: torch.nn.Module, steps: int):
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=5e-4)
    return optimizer, linear_warmup_decay(optimizer, steps)


def plain_loop(model, batches: list[dict], args: argparse.Namespace) -> float:
    model.to(args.device).train()
    optimizer, scheduler = optimizer_for(model, len(batches))
    timed = benchkit.PlainWindow(args.warmup, len(batches) - args.warmup, args.device)
    # the runner's DataLoader: its iterator draws a seed from torch's RNG, so the dropout masks
    # of the two sides are the same only if both read the batches through one
    loader = DataLoader(batches, batch_size=None, shuffle=False)
    for batch in timed.window(loader, lambda batch: benchkit.to_device(batch, args.device)):
        inputs, labels = split_batch(batch)
        with benchkit.autocast(args):
            loss = F.cross_entropy(model(**inputs).logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    return timed.rate


def runner(model, batches: list[dict], args: argparse.Namespace) -> float:
    def factory(params):
        return torch.optim.AdamW(params, lr=5e-4)

    task = ClassificationTask(model, 2, factory, linear_warmup_decay, weight_decay=0.01)
    timer = benchkit.WindowTimer(args.warmup)
    trainer = benchkit.bench_trainer(timer, **benchkit.trainer_device(args))
    loader = DataLoader(batches, batch_size=None, shuffle=False)
    trainer.fit(task, train_dataloaders=loader)
    return timer.rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data-dir", default=None, help="folder holding lcqmc/ (default: generated pairs)"
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=2)
    benchkit.timing_args(parser, batches=30, warmup=3, rounds=6)
    benchkit.device_args(parser)
    args = parser.parse_args()
    benchkit.setup(args)
    data_dir = Path(args.data_dir) if args.data_dir else generated_data(Path(tempfile.mkdtemp()))
    dm = LCQMCDataModule(str(data_dir), train_split="dev", batch_size=32, cache_dir=None)
    dm.setup()
    loader = dm.train_dataloader()
    batches = [b for _, b in zip(range(args.batches + args.warmup), loader, strict=False)]
    sizes = dict(
        hidden_size=args.hidden, num_heads=args.heads, ffn_size=args.ffn, num_layers=args.depth
    )
    kwargs = {**dm.model_kwargs, **sizes}
    variants = {
        "custom + SDPA": {"impl": "custom", "fused_attention": True},
        "custom, explicit softmax": {"impl": "custom", "fused_attention": False},
        "torch TransformerEncoderLayer": {"impl": "torch"},
    }
    results = {
        "sizes": sizes,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "precision": args.precision,
        "batches": args.batches,
        "data": "LCQMC dev (reduced protocol train split)" if args.data_dir else "generated",
        "rows": {},
    }
    for name, variant in variants.items():
        row = benchkit.paired_rounds(
            args.rounds,
            lambda v=variant: plain_loop(make_model(kwargs, v), batches, args),
            lambda v=variant: runner(make_model(kwargs, v), batches, args),
            "pairs/s",
        )
        results["rows"][name] = row
        print(f"{name}: {benchkit.describe(row, 'pairs/s')}", flush=True)
    benchkit.write_result(args, results)


if __name__ == "__main__":
    main()
