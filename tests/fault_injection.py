"""Kill a short real run with SIGKILL at many points, resume it each time, and compare its final
metrics with those of the same run never interrupted: they must be equal, exactly (CPU, fixed
seed). Run by the slow test tests/runner/test_fault_injection.py, or alone for the table:

    python tests/fault_injection.py --out faults.md

A kill point is a Lightning hook and how many times it has been called (the kill comes at that
call): training batches, validations, checkpoint saves, test batches. The run is killed by an
extra callback added in a driver process (the code under test is unchanged). When the kill came
before the first checkpoint, there is nothing to resume: the run is started again.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# 3 epochs of 6 batches, a validation (and a checkpoint) every 3 batches, 2 test batches
RUN = [
    "model=bag_attn",
    "scorer=dot",
    "data.source=sample",
    "data.batch_size=16",
    "data.eval_bag_sizes=[1,3]",
    "data.eval_variable_max=2",
    "model.hidden_size=16",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=6",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "seed=0",
]

# (hook, call): the kill comes at that call of the hook
POINTS = [
    ("on_train_batch_start", 1),
    ("on_train_batch_end", 2),
    ("on_validation_start", 1),
    ("on_validation_batch_end", 1),
    ("on_save_checkpoint", 1),
    ("on_save_checkpoint", 2),
    ("on_train_batch_end", 4),
    ("on_train_batch_end", 6),
    ("on_train_epoch_end", 1),
    ("on_train_epoch_start", 2),
    ("on_validation_end", 3),
    ("on_save_checkpoint", 5),
    ("on_train_batch_end", 9),
    ("on_validation_batch_end", 7),
    ("on_train_batch_end", 13),
    ("on_save_checkpoint", 7),
    ("on_validation_end", 6),
    ("on_train_end", 1),
    ("on_test_start", 1),
    ("on_test_batch_end", 1),
    ("on_test_batch_end", 3),
    ("on_test_end", 1),
]

DRIVER = """
import os, signal, sys
import pytorch_lightning as pl
from attnexp.runner import trainer as trainer_module

hook, at = sys.argv[1], int(sys.argv[2])

class Kill(pl.Callback):
    calls = 0

def kill(self, *args, **kwargs):
    Kill.calls += 1
    if Kill.calls == at:
        os.kill(os.getpid(), signal.SIGKILL)

setattr(Kill, hook, kill)
make = trainer_module.make_trainer

def make_with_kill(*args, **kwargs):
    trainer = make(*args, **kwargs)
    trainer.callbacks.append(Kill())
    return trainer

trainer_module.make_trainer = make_with_kill
sys.argv = [sys.argv[0], *sys.argv[3:]]
from attnexp.runner import train  # noqa: E402  (imports make_trainer by name: patch it there too)
train.make_trainer = make_with_kill
from attnexp.cli.train import cli  # noqa: E402
cli()
"""


def attnexp(root: Path, *args: str, kill: tuple[str, int] | None = None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    common = [f"paths.log_dir={root}/outputs", f"paths.data_dir={root}/data", *RUN, *args]
    (root / "data").mkdir(exist_ok=True)
    if kill is None:
        cmd = [sys.executable, "-m", "attnexp", *common]
    else:
        cmd = [sys.executable, "-c", DRIVER, kill[0], str(kill[1]), *common]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def final_metrics(run_dir: Path) -> dict:
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "completed", record.get("error")
    return record["metrics"]


def one_point(root: Path, hook: str, at: int, reference: dict) -> dict:
    killed = attnexp(root, kill=(hook, at))
    (run_dir,) = (root / "outputs" / "runs").iterdir()
    row = {"kill": f"{hook} #{at}", "killed": killed.returncode == -9}
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        again = attnexp(root, f"resume={run_dir}")
        row["then"] = "resumed"
    else:
        again = attnexp(root)
        run_dir = max((root / "outputs" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
        row["then"] = "started again (no checkpoint yet)"
    if again.returncode != 0:
        return {**row, "equal": False, "why": again.stderr[-500:]}
    metrics = final_metrics(run_dir)
    differ = sorted(
        k for k in reference.keys() | metrics.keys() if reference.get(k) != metrics.get(k)
    )
    return {**row, "equal": not differ, "why": ", ".join(differ)}


def run_all(points=POINTS, workdir: Path | None = None) -> tuple[dict, list[dict]]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        straight = Path(tmp) / "straight"
        straight.mkdir()
        result = attnexp(straight)
        assert result.returncode == 0, result.stderr[-2000:]
        (run_dir,) = (straight / "outputs" / "runs").iterdir()
        reference = final_metrics(run_dir)
        rows = []
        for i, (hook, at) in enumerate(points):
            root = Path(tmp) / f"point{i}"
            root.mkdir()
            rows.append(one_point(root, hook, at, reference))
            print(rows[-1], flush=True)
    return reference, rows


def table(rows: list[dict]) -> str:
    lines = ["| kill point | killed | then | final metrics equal |", "|---|---|---|---|"]
    for r in rows:
        equal = "yes" if r["equal"] else f"NO ({r['why']})"
        lines.append(f"| {r['kill']} | {'yes' if r['killed'] else 'no'} | {r['then']} | {equal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args()
    _, rows = run_all()
    text = table(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(0 if all(r["equal"] and r["killed"] for r in rows) else 1)


if __name__ == "__main__":
    main()
