"""A resumed run's logs: what its earlier attempts logged stays, what they logged after the
checkpoint the run goes on from is dropped (it is logged again)."""

import csv
import pickle

import pytest
from pytorch_lightning.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.summary.writer import event_file_writer
from torch.utils.tensorboard import SummaryWriter

from attnexp.tasks.loggers import CSVLogger, log_run_hparams, start_logs


@pytest.fixture(autouse=True)
def event_files_named_in_creation_order(monkeypatch):
    """TensorBoard reads a folder's event files in name order, and a name ends in the count of
    writers this process has made: once a test session has made ten, a later file ("....10")
    sorts before an earlier one ("....9") of the same second. Each test counts from 0 again."""
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(0))


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def first_attempt(save_dir) -> None:
    logger = CSVLogger(save_dir, name="csv", version="")
    for step in range(6):
        logger.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
    logger.log_metrics({"val/acc": 0.5}, step=3)  # another column, in its own row
    logger.save()


def test_a_resumed_csv_log_keeps_the_rows_before_its_checkpoint(tmp_path):
    first_attempt(tmp_path)
    resumed = CSVLogger(tmp_path, name="csv", version="", purge_step=4)
    resumed.log_metrics({"train/loss": 9.0}, step=4)
    resumed.log_metrics({"test/acc": 0.75}, step=5)  # a new column: the file is rewritten
    resumed.save()

    earlier = read_csv(tmp_path / "csv" / "metrics.attempt1.csv")  # the first attempt's, whole
    assert [r["step"] for r in earlier] == ["0", "1", "2", "3", "4", "5", "3"]
    rows = read_csv(tmp_path / "csv" / "metrics.csv")
    assert [(r["step"], r["train/loss"], r["val/acc"], r["test/acc"]) for r in rows] == [
        ("0", "1.0", "", ""),
        ("1", "0.5", "", ""),
        ("2", "0.3333333333333333", "", ""),
        ("3", "0.25", "", ""),
        ("3", "", "0.5", ""),
        ("4", "9.0", "", ""),  # steps 4 and 5 of the first attempt are gone
        ("5", "", "", "0.75"),
    ]


def test_a_fresh_csv_log_starts_empty(tmp_path):
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.save()
    assert [r["step"] for r in read_csv(tmp_path / "csv" / "metrics.csv")] == ["0"]


def test_the_restart_mark_hides_the_interrupted_attempts_later_points(tmp_path):
    """What `purge_step` relies on in TensorBoard's own reader: a fresh run marks step 0, and a
    resumed one's mark hides the older events at or after its step."""
    for purge_step, steps, value in ((0, range(10), 1.0), (5, range(5, 8), 2.0)):
        writer = SummaryWriter(tmp_path, purge_step=purge_step)
        for step in steps:
            writer.add_scalar("val/acc", value, step)
        writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Tensors("val/acc")] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_the_processes_ddp_spawn_starts_purge_nothing(tmp_path):
    """ddp_spawn pickles the run's loggers into the fit process, then into the test process, and
    each makes its writers again: only the run's start purges, else the test process would drop
    the rows fit logged and hide all its TensorBoard points behind a new restart mark."""
    first_attempt(tmp_path)
    run_loggers = [
        CSVLogger(tmp_path, name="csv", version="", purge_step=4),
        TensorBoardLogger(tmp_path, name="tb", version="", purge_step=4),
    ]
    start_logs(run_loggers)
    for steps, key in ((range(4, 6), "train/acc"), (range(6, 7), "test/acc")):  # fit, then test:
        for logger in pickle.loads(pickle.dumps(run_loggers)):  # each in a process of its own
            for step in steps:
                logger.log_metrics({"val/acc": float(step), key: 1.0}, step=step)
            logger.save()
            logger.finalize("success")
    rows = read_csv(tmp_path / "csv" / "metrics.csv")
    assert [(r["step"], r["val/acc"]) for r in rows if r["val/acc"]] == [
        ("3", "0.5"), ("4", "4.0"), ("5", "5.0"), ("6", "6.0")
    ]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "csv").glob("metrics.attempt*")) == [
        "metrics.attempt1.csv"
    ]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Tensors("val/acc")] == [4, 5, 6]


def test_a_resumed_runs_hparams_row_replaces_the_interrupted_attempts(tmp_path):
    """The HPARAMS row is written at the run's final step: an interrupted attempt's row, written
    after the checkpoint the run resumes from, is hidden by the restart mark with the rest of what
    that attempt logged; TensorBoard shows the resumed run's row alone."""
    for purge_step, final_step, acc in ((0, 8, 0.5), (5, 9, 0.75)):
        logger = TensorBoardLogger(tmp_path, name="tb", version="", purge_step=purge_step)
        start_logs([logger])
        log_run_hparams(logger, {"model": "bag_attn"}, {"test/acc": acc}, final_step)
        logger.finalize("success")
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Tensors("_hparams_/session_start_info")] == [9]
    assert [(e.step, e.tensor_proto.float_val) for e in events.Tensors("test/acc")] == [(9, [0.75])]
