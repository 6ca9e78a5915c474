"""Where a trained bag model's attention goes, per bag size: on the test bags of its own run.

    python docs/analysis/bag_attention_by_size.py outputs/runs/<run> [<run> ...]

For each test set of bags of n digits (`test/acc_bag{n}`; the run's `data.eval_bag_sizes`) it
prints the accuracy (the run's own `test/acc_bag{n}` when every batch is read), the mean attention
weight on the digits that decide the label (those equal to it: the largest under the default
rule, every copy if it occurs twice) and the
attention's entropy divided by log n (0: all weight on one digit, 1: uniform). The checkpoint is
the run's best, as evaluate takes it; the data dir is the run's.
"""

import argparse
import math

import torch

from attnexp.runner.build import build
from attnexp.runner.load import load_run, load_weights, read_weights


@torch.no_grad()
def attention_by_size(run: str, max_batches: int | None = None) -> list[dict]:
    cfg, choices, run_dir, ckpt = load_run(run)
    datamodule, task = build(cfg, choices, artifacts_dir=str(run_dir))
    load_weights(task, ckpt, read_weights(ckpt))
    datamodule.setup("test")
    model = task.model.eval()
    sizes = list(datamodule.eval_bag_sizes)
    loaders = datamodule.test_dataloader()[1 : 1 + len(sizes)]  # [0]: test/acc; then one per size
    rows = []
    for n, loader in zip(sizes, loaders, strict=True):
        pool, right, on_label, entropy, count = loader.dataset, 0, 0.0, 0.0, 0
        for i, (index, mask) in enumerate(loader.sampler):
            if max_batches is not None and i == max_batches:
                break
            batch = datamodule.on_after_batch_transfer(pool[(index, mask)], 0)
            output = model(batch["items"], mask, return_attention=True)
            logits, weights = output.logits, output.attention
            deciding = pool.labels[index] == batch["labels"][:, None]  # the digits the rule picked
            right += (logits.argmax(-1) == batch["labels"]).sum().item()
            on_label += (weights * deciding).sum().item()
            if n > 1:
                entropy += (-(weights * weights.clamp_min(1e-12).log()).sum() / math.log(n)).item()
            count += len(index)
        rows.append(
            {
                "bag_size": n,
                "acc": right / count,
                "weight_on_largest": on_label / count,
                "norm_entropy": entropy / count,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run dirs (or checkpoints) of bag_attn runs")
    for run in parser.parse_args().runs:
        print(run)
        for row in attention_by_size(run):
            print(
                f"  n={row['bag_size']:2d}  acc {row['acc']:.4f}  weight on the largest digit "
                f"{row['weight_on_largest']:.3f}  entropy/log n {row['norm_entropy']:.3f}"
            )


if __name__ == "__main__":
    main()
