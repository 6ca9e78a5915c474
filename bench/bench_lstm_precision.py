"""The IMDB BiLSTM + attention in fp32, bf16-mixed and 16-mixed (fp16): step time and accuracy.

    python bench/bench_lstm_precision.py --device cuda --out precision.json --table precision.md
    python bench/bench_lstm_precision.py --precisions 32-true,bf16-mixed --seeds 1 --steps 2 \
        --warmup 1 --extra model.hidden_size=8 model.embed_dim=8                 # a CPU smoke run

One sweep of real runs (`python -m attnexp -m ...`, one job after the other in one process):
`experiment=imdb/tuned` (model=lstm_attn's defaults: BiLSTM + additive attention, 600 tokens,
cosine schedule) cut to --warmup + --steps optimizer steps, every precision x every seed. On the
embedded sample (1,600 training reviews: ~11 batches an epoch) the dev set is checked every 44
batches, as often as the recipe checks it on the full set; with --data-dir, the full IMDB as the
recipe reads it.

Reported per precision: ms per training step (median over the seeds of each job's training
window, sweepkit.TrainWindow: validation and checkpoints left out), the test accuracy of each
seed (best dev checkpoint) and their mean, and whether it keeps accuracy: its mean is at least
the lowest fp32 seed's. `fastest_keeping_accuracy` is what `trainer=gpu` should default to.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import sweepkit
from bench_parallel_jobs import every_44_batches

from attnexp.runner.threads import available_cores


def overrides(args) -> list[str]:
    batches = args.warmup + args.steps
    # the sample's epoch is ~11 batches: the dev set checked every 44, as the recipe checks the
    # full set's (4 times an epoch of 176)
    data = [f"paths.data_dir={args.data_dir}"] if args.data_dir else ["data.source=sample",
            *every_44_batches(batches)]  # fmt: skip
    device = ["trainer=gpu"] if args.device == "cuda" else []
    return [
        "experiment=imdb/tuned", *device, f"trainer.precision={args.precisions}",
        "seed=" + ",".join(str(s) for s in range(args.seeds)), "trainer.max_epochs=1000",
        f"trainer.max_steps={batches}", *data,
        *sweepkit.device_overrides(args.device, available_cores()), *args.extra,
    ]  # fmt: skip


def summarize(jobs: list[dict], batch_size: int) -> dict:
    """Per precision: step time, accuracies, and the verdict against fp32's seeds."""
    by_precision: dict[str, list[dict]] = {}
    for job in jobs:
        if job["status"] == "completed" and job["window"]:
            by_precision.setdefault(job["window"]["precision"], []).append(job)
    rows = {}
    for precision, done in by_precision.items():
        rates = [j["window"]["per_s"] for j in done if j["window"]["per_s"]]
        accs = [j["test_acc"] for j in done if j["test_acc"] is not None]
        rows[precision] = {
            "seeds": [j["seed"] for j in done],
            "ms_per_step": round(1000 * batch_size / statistics.median(rates), 3)
            if rates
            else None,
            "per_s_by_seed": [round(r, 1) for r in rates],
            "test_acc_by_seed": [round(a, 4) for a in accs],
            "test_acc_mean": round(statistics.mean(accs), 4) if accs else None,
        }
    reference = rows.get("32-true", {}).get("test_acc_by_seed")
    for row in rows.values():
        row["keeps_accuracy"] = (
            None if not reference or row["test_acc_mean"] is None
            else row["test_acc_mean"] >= min(reference)
        )  # fmt: skip
    keeping = [p for p, r in rows.items() if r["keeps_accuracy"] and r["ms_per_step"]]
    fastest = min(keeping, key=lambda p: rows[p]["ms_per_step"]) if keeping else None
    return {"precisions": rows, "fastest_keeping_accuracy": fastest}


def markdown(result: dict, args) -> str:
    lines = [
        f"IMDB BiLSTM + attention (experiment=imdb/tuned) on {result['device']}: "
        f"{args.steps} timed steps after {args.warmup}, {args.seeds} seed(s), data: "
        f"{result['data']}; keeps accuracy = mean test accuracy >= the lowest fp32 seed's",
        "",
        "| precision | ms/step (median over seeds) | test acc by seed | mean | keeps accuracy |",
        "|---|---:|---|---:|---|",
    ]
    for precision, row in result["precisions"].items():
        accs = ", ".join(f"{a:.4f}" for a in row["test_acc_by_seed"])
        mean = f"{row['test_acc_mean']:.4f}" if row["test_acc_mean"] is not None else ""
        lines.append(f"| {precision} | {row['ms_per_step']} | {accs} | {mean} | "
                     f"{row['keeps_accuracy']} |")  # fmt: skip
    for job in result["failed"]:
        lines.append(f"| failed: {job['dir']} | | {str(job['error'])[:80]} | | |")
    lines += ["", f"fastest that keeps accuracy: {result['fastest_keeping_accuracy']}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precisions", default="32-true,bf16-mixed,16-mixed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=280)
    parser.add_argument(
        "--batch-size", type=int, default=128, help="the recipe's (data.batch_size)"
    )
    parser.add_argument("--data-dir", default=None, help="folder holding imdb/")
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every job")
    parser.add_argument("--keep", default=None, help="keep the sweep dir and its log here")
    parser.add_argument("--out", default=None, help="JSON results")
    parser.add_argument("--table", default=None, help="markdown table")
    args = parser.parse_args()
    device = "CPU"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device here; use --device cpu")
        device = torch.cuda.get_device_name()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="lstm-precision-"))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    extra = [f"data.batch_size={args.batch_size}"]
    sweep = sweepkit.run_sweep(
        [*overrides(args), *extra], folder / "sweep", args.warmup, args.timeout_s,
        folder / "sweep.log",
    )  # fmt: skip
    failed = [j for j in sweep["jobs"] if j["status"] != "completed" or not j["window"]]
    result = {
        "device": device, "data": args.data_dir or "embedded sample", "warmup": args.warmup,
        "steps": args.steps, "seeds": args.seeds, **summarize(sweep["jobs"], args.batch_size),
        "failed": [{"dir": j["dir"], "error": j["error"]} for j in failed],
        "returncode": sweep["returncode"], "sweep": str(folder / "sweep"),
        "wall_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    if sweep["returncode"] and not failed:
        result["error"] = sweep["output_tail"]
    table = markdown(result, args)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.table:
        Path(args.table).write_text(table)


if __name__ == "__main__":
    main()
