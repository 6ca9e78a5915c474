"""Training-step time per torch thread count, for each model family: what `trainer.threads=auto`
chooses is measured here.

    python bench/bench_threads.py                                  # embedded samples
    python bench/bench_threads.py --data-dir <data_dir> --out threads.json

Each family is built from its config exactly as a run builds it (`model=... data...`), a few of its
training batches are taken, and one forward + backward + optimizer step is timed per batch with
each thread count (1, 2, 4, ... up to the cores this process may use) in turn within every round, so that a
burst of load from other processes hits all thread counts alike. Reported: the median step time
per thread count, and the fastest, with the load average the machine had.
"""

import argparse
import os
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import benchkit  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hydra import compose  # noqa: E402

from attnexp.runner.build import build  # noqa: E402
from attnexp.runner.config import package_configs, register_resolvers  # noqa: E402
from attnexp.tasks.classification import split_batch  # noqa: E402

# family -> the overrides of a run of it (the design card's and each task's main model)
FAMILIES = {
    "bags": ["model=bag_attn", "scorer=dot"],
    "lstm": ["model=lstm_attn", "scorer=dot"],
    "lstm_mhsa": ["model=lstm_mhsa"],
    "transformer": ["model=transformer"],
}


def family_step(overrides: list[str], data_dir: str | None, batches: int) -> Callable[[int], None]:
    """`step(i)`: one training step of the family's model on its i-th batch."""
    extra = [f"paths.data_dir={data_dir}"] if data_dir else ["data.source=sample"]
    with package_configs():
        cfg = compose("train", overrides=[*overrides, *extra], return_hydra_config=False)
    data, task = build(cfg, {}, overrides=overrides)
    loader = iter(data.train_dataloader())
    taken = [data.on_after_batch_transfer(next(loader), 0) for _ in range(batches)]
    model = task.model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        inputs, labels = split_batch(taken[i % len(taken)])
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(**inputs).logits, labels).backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    benchkit.timing_args(parser, batches=6, warmup=1, rounds=5)
    parser.add_argument("--data-dir", default=None, help="<data_dir> (default: embedded samples)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args()
    benchkit.setup(args)
    register_resolvers()
    cores = len(os.sched_getaffinity(0))
    counts = [str(n) for n in sorted({1, 2, 4, 8, 16, cores}) if n <= cores]
    results = {}
    for family in args.families:
        try:
            step = family_step(FAMILIES[family], args.data_dir, args.batches)
        except Exception as err:  # e.g. LCQMC ships no sample: say so, time the others
            print(f"{family}: skipped ({type(err).__name__}: {str(err).splitlines()[0]})")
            continue

        def seconds(way: str, i: int, step=step) -> float:
            torch.set_num_threads(int(way))
            start = time.perf_counter()
            step(i)
            return time.perf_counter() - start

        medians, rounds = benchkit.taking_turns(
            counts, args.rounds, args.warmup + args.batches, args.warmup, seconds
        )
        best = min(medians, key=medians.get)
        results[family] = {
            "ms_per_step": {n: 1000 * s for n, s in medians.items()},
            "ms_per_step_rounds": {n: [1000 * s for s in r] for n, r in rounds.items()},
            "fastest": int(best),
        }
        shown = "  ".join(f"{n} thr {1000 * s:7.1f} ms" for n, s in medians.items())
        print(f"{family:<12} {shown}  fastest {best}", flush=True)
    benchkit.write_result(args, {"cores": cores, "load_avg": os.getloadavg(), "families": results})


if __name__ == "__main__":
    main()
