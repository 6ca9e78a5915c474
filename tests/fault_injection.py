"""Kill a short real run of each model family with SIGKILL at many points, resume it each time,
and compare its final metrics with those of the same run never interrupted: they must be equal,
exactly (CPU, fixed seed), `val/*_last` included. Run by the slow test
tests/runner/test_fault_injection.py, or alone for the table:

    python tests/fault_injection.py --out faults.md                  # every family
    python tests/fault_injection.py --family seq2seq --out seq2seq.md  # one

A kill point is a Lightning hook and how many times it has been called (the kill comes at that
call): training batches, validations, checkpoint saves, test batches. The run is killed by an
extra callback added in a driver process (the code under test is unchanged). When the kill came
before the first checkpoint, there is nothing to resume: the run is started again.

`in_process=True` (the default suite's quick check) runs every attempt in the calling process and
interrupts it with an exception at the kill point instead: no new interpreter per attempt, and
the global random state the resumed attempt finds is whatever the earlier ones left.
"""

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# 3 epochs of 6 batches, a validation (and a checkpoint) every 3 batches, 2 val and test batches
SCHEDULE = (
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=6",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "seed=0",
)
BAGS = (
    "model=bag_attn",
    "scorer=dot",
    "data.source=sample",
    "data.batch_size=16",
    "data.eval_bag_sizes=[1,3]",
    "data.eval_variable_max=2",
    "model.hidden_size=16",
)
TRANSLATION = ("data.source=sample", "data.batch_size=16", "data.val_bleu_sources=16")

# (hook, call): the kill comes at that call of the hook. For SCHEDULE: validations after training
# batches 3, 6, 9, ..., 18 (validation hook calls #2 to #7: #1 is the sanity check); a kill
# at one of the first two saves (the best checkpoint, then last.ckpt, after batch 3) leaves no
# last.ckpt.
POINTS = (
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
    ("on_test_batch_end", 2),
    ("on_test_end", 1),
)
# The bags test on 4 sets (the training size, sizes 1 and 3, variable sizes) of 2 batches each.
BAG_POINTS = (*POINTS[:-2], ("on_test_batch_end", 3), ("on_test_end", 1))
# trainer.max_steps=9 with a validation every 4 batches in a longer epoch: validations after
# batches 4 and 8 (validation hook calls #2 and #3: #1 is the sanity check), then one more batch
# and no validation; training ends mid-epoch.
MID_EPOCH_POINTS = (
    ("on_train_batch_end", 3),
    ("on_validation_end", 2),
    ("on_save_checkpoint", 2),
    ("on_train_batch_end", 5),
    ("on_validation_start", 3),
    ("on_validation_end", 3),
    ("on_save_checkpoint", 3),
    ("on_save_checkpoint", 4),
    ("on_train_batch_start", 9),
    ("on_train_batch_end", 9),
    ("on_train_epoch_end", 1),
    ("on_train_end", 1),
    ("on_test_start", 1),
    ("on_test_batch_end", 3),
    ("on_test_end", 1),
)


@dataclasses.dataclass(frozen=True)
class Family:
    """A short run of one model family and where it is killed; `quick`: the kill points of the
    default suite's in-process check."""

    overrides: tuple[str, ...]
    points: tuple[tuple[str, int], ...] = POINTS
    quick: tuple[tuple[str, int], ...] = ()


FAMILIES = {
    "bags": Family((*BAGS, *SCHEDULE), BAG_POINTS),
    "bags, last validation mid-epoch": Family(
        (
            *BAGS,
            "trainer.max_steps=9",
            "trainer.val_check_interval=4",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=2",
            "trainer.enable_progress_bar=false",
            "seed=0",
        ),
        MID_EPOCH_POINTS,
        quick=(("on_train_batch_end", 9),),
    ),  # fmt: skip
    "lstm_attn": Family(
        (
            "model=lstm_attn",
            "data.source=sample",
            "data.batch_size=16",
            "data.max_seq_len=32",
            "model.embed_dim=8",
            "model.hidden_size=8",
            *SCHEDULE,
        ),
    ),  # fmt: skip
    "seq2seq": Family(
        (
            "model=seq2seq",
            *TRANSLATION,
            "model.embed_dim=16",
            "model.hidden_size=16",
            "model.dropout=0.1",
            "model.teacher_forcing=0.5",
            *SCHEDULE,
        ),
        quick=(("on_validation_end", 6),),  # mid-epoch, in the last epoch
    ),  # fmt: skip
    "transformer_seq2seq": Family(
        (
            "model=transformer_seq2seq",
            *TRANSLATION,
            "model.hidden_size=16",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.ffn_size=32",
            *SCHEDULE,
        ),
    ),  # fmt: skip
}

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

KILLED = -signal.SIGKILL  # a subprocess's returncode when the kill came


class Interrupted(Exception):
    """The in-process stand-in for SIGKILL."""


def attnexp(root: Path, family: Family, *args: str, kill=None, in_process: bool = False):
    if in_process:
        return in_this_process(root, [*family.overrides, *args], kill)
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    common = [f"paths.log_dir={root}/outputs", f"paths.data_dir={root}/data"]
    common += [*family.overrides, *args]
    (root / "data").mkdir(exist_ok=True)
    if kill is None:
        cmd = [sys.executable, "-m", "attnexp", *common]
    else:
        cmd = [sys.executable, "-c", DRIVER, kill[0], str(kill[1]), *common]
    return subprocess.run(
        cmd, cwd=root, env={**os.environ, **env}, capture_output=True, text=True, timeout=900
    )


def in_this_process(root: Path, overrides: list[str], kill) -> subprocess.CompletedProcess:
    """`python -m attnexp <overrides>` in this process, interrupted by `Interrupted` at the kill
    point; its returncode is KILLED then."""
    import pytorch_lightning as pl
    from cli_helpers import run_cli_in_process

    from attnexp.runner import train

    make, calls = train.make_trainer, [0]

    def interrupt(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill[1]:
            raise Interrupted(f"{kill[0]} #{kill[1]}")

    def make_with_kill(*args, **kwargs):
        trainer = make(*args, **kwargs)
        trainer.callbacks.append(type("Kill", (pl.Callback,), {kill[0]: interrupt})())
        return trainer

    if kill is not None:
        train.make_trainer = make_with_kill
    try:
        result = run_cli_in_process(root, *overrides)
    finally:
        train.make_trainer = make
    if kill is not None and result.returncode != 0 and calls[0] >= kill[1]:
        result.returncode = KILLED
    return result


def final_metrics(run_dir: Path) -> dict:
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "completed", record.get("error")
    return record["metrics"]


def one_point(root: Path, family: Family, hook: str, at: int, reference: dict, **how) -> dict:
    killed = attnexp(root, family, kill=(hook, at), **how)
    (run_dir,) = (root / "outputs" / "runs").iterdir()
    row = {"kill": f"{hook} #{at}", "killed": killed.returncode == KILLED}
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        again = attnexp(root, family, f"resume={run_dir}", **how)
        row["then"] = "resumed"
    else:
        again = attnexp(root, family, **how)
        run_dir = max((root / "outputs" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
        row["then"] = "started again (no checkpoint yet)"
    if again.returncode != 0:
        return {**row, "equal": False, "why": again.stderr[-500:]}
    metrics = final_metrics(run_dir)
    differ = sorted(
        k for k in reference.keys() | metrics.keys() if reference.get(k) != metrics.get(k)
    )
    return {**row, "equal": not differ, "why": ", ".join(differ)}


def run_family(
    family: Family, points=None, workdir: Path | None = None, in_process: bool = False
) -> tuple[dict, list[dict]]:
    """The uninterrupted run's metrics, and a row per kill point (`points`: the family's own)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        straight = Path(tmp) / "straight"
        straight.mkdir()
        result = attnexp(straight, family, in_process=in_process)
        assert result.returncode == 0, result.stderr[-2000:]
        (run_dir,) = (straight / "outputs" / "runs").iterdir()
        reference = final_metrics(run_dir)
        assert any(k.endswith("_last") for k in reference), reference  # val/*_last compared too
        rows = []
        for i, (hook, at) in enumerate(family.points if points is None else points):
            root = Path(tmp) / f"point{i}"
            root.mkdir()
            rows.append(one_point(root, family, hook, at, reference, in_process=in_process))
            print(rows[-1], flush=True)
    return reference, rows


def table(rows: list[dict]) -> str:
    """One row per kill point, one column per family: how the run went on (resumed, or started
    again without a checkpoint) and whether its final metrics equal the uninterrupted run's."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    cells = {(r["kill"], r["family"]): r for r in rows}
    lines = [
        "| kill point | " + " | ".join(families) + " |",
        "|---|" + "---|" * len(families),
    ]
    for kill in dict.fromkeys(r["kill"] for r in rows):
        line = []
        for family in families:
            r = cells.get((kill, family))
            if r is None:
                line.append("–")
            elif not r["killed"]:
                line.append("NOT KILLED")
            else:
                then = "resumed" if r["then"] == "resumed" else "started again"
                line.append(f"{then}, exact" if r["equal"] else f"{then}, NO ({r['why']})")
        lines.append(f"| {kill} | " + " | ".join(line) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), default=None)
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args()
    rows, commands = [], []
    for name in args.family or FAMILIES:
        started = time.perf_counter()
        _, family_rows = run_family(FAMILIES[name])
        rows += [{"family": name, **row} for row in family_rows]
        minutes = (time.perf_counter() - started) / 60
        commands.append(f"- {name} ({minutes:.1f} min): `{' '.join(FAMILIES[name].overrides)}`")
    text = table(rows) + "\n\n" + "\n".join(commands)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(0 if all(r["equal"] and r["killed"] for r in rows) else 1)


if __name__ == "__main__":
    main()
