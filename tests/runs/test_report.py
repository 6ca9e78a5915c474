"""attnexp.runs.collect and attnexp.runs.report on hand-written run records: no training, so each
in well under a second."""

import csv
import json
import os
import platform
import statistics

import pytest
from cli_helpers import RUN_MODULES, run_counting_imports
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from attnexp.cli.report import main as report_main
from attnexp.runs import collect, report, tables
from attnexp.runs.lock import owning
from attnexp.runs.naming import natural_key
from attnexp.viz.report import plot_bag_sizes, plot_val_curves


def write_run(
    root,
    name,
    status="completed",
    seed=0,
    overrides=(),
    metrics=None,
    history=None,
    error=None,
    config=None,
    **fields,
):
    """`config`: the composed config, written to .hydra/config.yaml; `fields`: more of the record."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    record = {
        "status": status,
        "seed": seed,
        "overrides": list(overrides),
        "metrics": metrics or {},
        "history": history or [],
        "duration_s": 1.5,
        **fields,
    }
    if error:
        record["error"] = error
    (run_dir / "metrics.json").write_text(json.dumps(record))
    if config is not None:
        (run_dir / ".hydra").mkdir()
        OmegaConf.save(config, run_dir / ".hydra" / "config.yaml")
    return run_dir


def bag_metrics(acc):
    return {
        "val/acc": acc,
        "val/acc_last": acc,
        "val/acc_best": acc,
        "test/acc": acc - 0.01,
        "test/acc_bag1": acc + 0.02,
        "test/acc_bag3": acc - 0.01,
        "test/acc_bag6": acc - 0.05,
    }


def curve(*accs):
    return [{"epoch": i, "step": 10 * (i + 1), "val/acc": a} for i, a in enumerate(accs)]


@pytest.fixture
def sweep(tmp_path):
    """2 scorers x 2 seeds completed, one failed job, one job still running, one half-written file."""
    root = tmp_path / "sweep"
    num = 0
    for scorer, base in (("dot", 0.90), ("additive", 0.80)):
        for seed in (0, 1):
            acc = base + 0.02 * seed
            write_run(
                root,
                f"{num}_scorer={scorer},seed={seed}",
                seed=seed,
                overrides=[f"scorer={scorer}", f"seed={seed}", "trainer.max_epochs=2"],
                metrics=bag_metrics(acc),
                history=curve(acc - 0.1, acc),
            )
            num += 1
    write_run(
        root,
        "4_scorer=bilinear,seed=0",
        status="failed",
        overrides=["scorer=bilinear", "seed=0", "trainer.max_epochs=2"],
        error="ValueError: boom\nmore lines",
    )
    write_run(
        root,
        "5_scorer=bilinear,seed=1",
        status="running",
        pid=os.getpid(),  # this process: alive
        host=platform.node(),
        seed=1,
        overrides=["scorer=bilinear", "seed=1", "trainer.max_epochs=2"],
        history=curve(0.4, 0.5),
    )
    with owning(root / "5_scorer=bilinear,seed=1", "train"):  # the job at work holds its lock
        yield root


def test_report_rows_statuses_and_metrics(sweep):
    written = report.write_report(sweep)
    rows = list(csv.DictReader(written["csv"].open()))
    assert [r["run"] for r in rows] == [
        f"{i}_scorer={s},seed={k}"
        for i, (s, k) in enumerate(
            [
                ("dot", 0),
                ("dot", 1),
                ("additive", 0),
                ("additive", 1),
                ("bilinear", 0),
                ("bilinear", 1),
            ]
        )
    ]
    assert [r["status"] for r in rows] == ["completed"] * 4 + ["failed", "running"]
    # only what varies becomes a column; seeds get their own column
    assert "scorer" in rows[0] and "trainer.max_epochs" not in rows[0]
    for row in rows[:4]:
        record = json.loads((sweep / row["run"] / "metrics.json").read_text())
        for key, value in record["metrics"].items():
            assert float(row[key]) == pytest.approx(value)
    assert rows[4]["error"].startswith("ValueError: boom")
    assert float(rows[5]["val/acc"]) == pytest.approx(0.5)  # a run in flight: its last epoch
    assert [r["epochs"] for r in rows] == ["2"] * 4 + ["0", "2"]


def test_a_run_that_stopped_early_says_at_which_epoch(tmp_path):
    """callbacks=early_stopping: the CSV's stopped_early is the epoch (blank where a run trained
    its max_epochs), the note says it; a record that says it in a form attnexp never writes (a
    hand edit) is an unreadable row, as for the other fields."""
    stopped = {"epoch": 2, "step": 30, "reason": "Monitored metric val/acc did not improve"}
    write_run(tmp_path, "a", history=curve(0.8, 0.9, 0.88), stopped_early=stopped)
    write_run(tmp_path, "b", seed=1, history=curve(0.8, 0.9, 0.91, 0.92))
    write_run(tmp_path, "c", seed=2, history=curve(0.8), stopped_early={"epoch": "2"})
    written = report.write_report(tmp_path)
    rows = {r["run"]: r for r in csv.DictReader(written["csv"].open())}
    assert {name: row["stopped_early"] for name, row in rows.items()} == {
        "a": "2",
        "b": "",
        "c": "",
    }
    assert [row["epochs"] for row in rows.values()] == ["3", "4", "0"]
    assert rows["c"]["status"] == "unreadable"
    assert rows["c"]["error"] == 'its "stopped_early" has no whole-number "epoch"'
    text = written["markdown"].read_text()
    assert "stopped early at epoch 2" in next(line for line in text.splitlines() if "| a |" in line)
    assert text.count("stopped early") == 1


def test_markdown_mean_std_over_seeds_and_failed_marked(sweep):
    text = report.write_report(sweep)["markdown"].read_text()
    dot = [0.90, 0.92]
    expected = f"{statistics.mean(dot):.4f} ± {statistics.stdev(dot):.4f}"
    dot_line = next(line for line in text.splitlines() if line.startswith("| dot |"))
    assert expected in dot_line and "| 0,1 | 2/2 |" in dot_line
    assert "0/2 (failed, running)" in text
    # no mean of runs that did not complete: a running run's epoch 2 is not a result
    rows = {row[0]: row for row in variant_rows(text)}
    assert rows["bilinear"] == ["bilinear", "0,1", "0/2 (failed, running)"]  # metric cells empty
    assert "**FAILED**" in text and "**RUNNING**" in text
    assert "Metrics of runs not completed are from their last finished epoch." in text
    assert "6 runs: 4 completed, 1 failed, 1 running." in text


def test_a_pipe_in_a_cell_does_not_split_the_row(tmp_path):
    write_run(tmp_path, "r0", "failed", error="ValueError: expected a | b")
    text = report.write_report(tmp_path)["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| r0 |"))
    assert "ValueError: expected a \\| b |" in row


def test_plots_written(sweep):
    written = report.write_report(sweep)
    for key in ("val_acc", "bag_size"):
        assert written[key].stat().st_size > 1000
        assert written[key].read_bytes()[:4] == b"\x89PNG"
    curves = report.bag_size_curves(collect.find_runs(sweep))
    assert sorted(curves["scorer=dot"]) == [1, 3, 6]
    assert curves["scorer=dot"][1] == pytest.approx([0.92, 0.94])


def test_unreadable_record_and_out_dir(sweep, tmp_path):
    (sweep / "6_scorer=dot,seed=2").mkdir()
    (sweep / "6_scorer=dot,seed=2" / "metrics.json").write_text('{"status": "runn')
    written = report.write_report(sweep, tmp_path / "elsewhere")
    rows = list(csv.DictReader(written["csv"].open()))
    assert rows[-1]["status"] == "unreadable"
    assert written["csv"].parent == tmp_path / "elsewhere"


@pytest.mark.parametrize(
    ("record", "problem"),
    [  # each stopped the whole report with a TypeError, KeyError or AttributeError
        ({"status": "completed", "metrics": [1, 2]}, 'its "metrics" is [1, 2]'),
        ({"status": "failed", "history": [{"val/acc": 0.5}]}, 'row without a whole-number "epoch"'),
        ({"status": "completed", "machine": "x"}, 'its "machine" is "x"'),
        ({"status": None, "seed": True}, 'its "seed" is true'),
    ],
)
def test_a_record_with_fields_of_the_wrong_kind_is_an_unreadable_row(
    sweep, tmp_path, record, problem
):
    (sweep / "6_scorer=dot,seed=2").mkdir()
    (sweep / "6_scorer=dot,seed=2" / "metrics.json").write_text(json.dumps(record))
    written = report.write_report(sweep, tmp_path / "elsewhere")
    rows = list(csv.DictReader(written["csv"].open()))
    unreadable = [row for row in rows if row["status"] == "unreadable"]
    assert len(unreadable) == 1 and problem in unreadable[0]["error"]


def test_a_record_that_is_not_an_object_and_an_out_that_is_a_file(sweep, tmp_path, capsys):
    """A metrics.json holding a JSON list stopped the report with an AttributeError; --out a file
    said only "[Errno 17] File exists"."""
    (sweep / "6_scorer=dot,seed=2").mkdir()
    (sweep / "6_scorer=dot,seed=2" / "metrics.json").write_text("[1, 2]")
    written = report.write_report(sweep, tmp_path / "elsewhere")
    rows = list(csv.DictReader(written["csv"].open()))
    assert rows[-1]["status"] == "unreadable"
    (tmp_path / "afile").write_text("x")
    assert report_main([str(sweep), "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert (
        f"error: --out {tmp_path / 'afile'}: {tmp_path / 'afile'} is a file, so the report" in err
    )


def test_a_report_never_replaces_the_report_of_other_runs(sweep, tmp_path, capsys):
    other = tmp_path / "other"
    write_run(other, "0_seed=0", metrics=bag_metrics(0.7), history=curve(0.7))
    out = tmp_path / "reports"
    assert report_main([str(sweep), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert report_main([str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} holds the report of {sweep}, which this report of {other} would" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert report_main([str(sweep), "--out", str(out)]) == 0  # the same runs: refreshed


def test_an_out_holding_a_report_md_of_its_own_is_never_replaced(sweep, tmp_path, capsys):
    """A report.md that is not a report (notes of one's own) is other runs' too."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("My notes\n")
    assert report_main([str(sweep), "--out", str(out)]) == 2
    assert f"--out {out} holds the report of other runs, which" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "My notes\n"


def test_a_folder_of_evaluations_only_says_so(tmp_path):
    write_run(tmp_path, "eval", kind="evaluate", metrics={"test/acc": 0.9})
    with pytest.raises(FileNotFoundError, match=r"training run under .*, only 1 of evaluations"):
        report.write_report(tmp_path)


def test_single_run_dir_and_cli(tmp_path, capsys):
    run_dir = write_run(tmp_path, "runs/only", metrics=bag_metrics(0.9), history=curve(0.8, 0.9))
    assert report_main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "| only | completed |" in out
    assert "not completed" not in out  # said only where a run did not complete
    assert "Evaluation records" not in out  # said only where there are some
    assert report_main([str(tmp_path / "empty_nonexistent")]) == 2
    assert f"error: {tmp_path / 'empty_nonexistent'} is not a directory" in (
        capsys.readouterr().err
    )
    (tmp_path / "empty").mkdir()
    assert report_main([str(tmp_path / "empty")]) == 2
    assert "no metrics.json" in capsys.readouterr().err


def test_the_report_reads_records_without_torch(sweep, tmp_path):
    """A report of a sweep imports neither torch nor Lightning (~2 s of a ~3 s report)."""
    result, imported = run_counting_imports(
        ["-m", "attnexp.report", str(sweep), "--out", str(tmp_path / "out")], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "report.md").is_file() and "matplotlib" in imported
    assert not imported & RUN_MODULES


def test_folder_of_symlinks_to_runs(sweep, tmp_path):
    picked = tmp_path / "picked"
    picked.mkdir()
    for name in ("0_scorer=dot,seed=0", "2_scorer=additive,seed=0"):
        (picked / name).symlink_to(sweep / name, target_is_directory=True)
    (picked / "loop").symlink_to(picked, target_is_directory=True)  # a cycle is walked once
    runs = collect.find_runs(picked)
    assert sorted(r.name for r in runs) == ["0_scorer=dot,seed=0", "2_scorer=additive,seed=0"]


def variant_rows(text):
    """The rows of report.md's variants table, as lists of cells."""
    table = text.split("## Variants")[1].split("## Runs")[0]
    return [line.strip("| ").split(" | ") for line in table.splitlines()[4:] if line.strip()]


def test_evaluation_records_listed_apart(sweep, capsys):
    write_run(
        sweep,
        "evals/e0",
        seed=0,
        overrides=["ckpt_path=x"],
        metrics={"test/acc": 0.1},
        kind="evaluate",
        run_dir="/runs/r0",
    )
    written = report.write_report(sweep)
    rows = list(csv.DictReader(written["csv"].open()))
    assert len(rows) == 6 and all(not r["run"].startswith("evals") for r in rows)
    text = written["markdown"].read_text()
    assert "6 runs:" in text and "## Evaluation records (1, not counted as runs)" in text
    assert "| evals/e0 | completed | /runs/r0 |" in text
    assert report_main([str(sweep / "evals")]) == 2
    assert "no metrics.json of a training run" in capsys.readouterr().err


def test_runs_on_other_data_are_not_averaged(tmp_path):
    base = ["model=lstm_attn", "scorer=dot"]
    for name, seed, source, data_dir, acc in (
        ("sample_0", 0, "sample", None, 0.6),
        ("full_0", 0, "local", "/data", 0.9),
        ("full_1", 1, "local", "/data", 0.8),
        ("other_0", 0, "local", "/other", 0.7),
    ):
        extra = [f"paths.data_dir={data_dir}"] if data_dir else []
        write_run(
            tmp_path,
            name,
            seed=seed,
            overrides=[*base, *extra, f"seed={seed}"],
            metrics={"test/acc": acc},
            data_source=source,
        )
    write_run(tmp_path, "early_fail", "failed", overrides=base)  # no data_source: unknown data
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert "different data (data_source: local:/data, local:/other, sample)" in text
    rows = {row[0]: row for row in variant_rows(text)}
    assert (
        rows["local:/data"][1:3] == ["0,1", "2/2"] and rows["local:/data"][3] == "0.8500 ± 0.0707"
    )
    assert rows["sample"][3] == "0.6000" and rows["local:/other"][3] == "0.7000"


def test_the_data_column_is_there_once_when_the_data_varies(tmp_path):
    for seed, source in enumerate(("sample", "hub")):
        write_run(tmp_path, f"r{seed}", seed=seed, data_source=source, metrics={"test/acc": 0.7})
    header = report.write_report(tmp_path)["csv"].read_text().splitlines()[0].split(",")
    assert header.count("data_source") == 1


def test_metric_columns_are_in_natural_order(tmp_path):
    write_run(tmp_path, "r0", metrics={"test/acc_bag10": 0.7, "test/acc_bag2": 0.9})
    header = report.write_report(tmp_path)["csv"].read_text().splitlines()[0].split(",")
    assert header.index("test/acc_bag2") < header.index("test/acc_bag10")


def test_the_data_all_runs_read_is_said(tmp_path):
    """A sweep on the embedded sample reads like results unless the report says so."""
    for seed in (0, 1):
        write_run(
            tmp_path / "s", f"r{seed}", seed=seed, data_source="sample", metrics={"test/acc": 0.7}
        )
    written = report.write_report(tmp_path / "s")
    assert (
        "Data: the package's embedded sample, not the full dataset"
        in written["markdown"].read_text()
    )
    assert {row["data_source"] for row in csv.DictReader(written["csv"].open())} == {"sample"}
    write_run(tmp_path / "s", "a_early_fail", "failed", seed=2)  # listed first, no data_source
    assert "embedded sample" in report.write_report(tmp_path / "s")["markdown"].read_text()
    write_run(tmp_path / "l", "r0", data_source="local", data_dir="/d", metrics={"test/acc": 0.9})
    assert "Data: local:/d." in report.write_report(tmp_path / "l")["markdown"].read_text()


def test_the_recorded_absolute_data_dir_tells_local_data_apart(tmp_path):
    for name, data_dir in (("from_a", "/a/data"), ("from_b", "/b/data")):  # both ran with ./data
        write_run(
            tmp_path,
            name,
            data_source="local",
            data_dir=data_dir,
            metrics={"test/acc": 0.5},
            config={"paths": {"data_dir": "data"}},
        )
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert {row[0] for row in variant_rows(text)} == {"local:/a/data", "local:/b/data"}
    assert "One config under" not in text  # one config, but on two datasets: two experiments


def test_local_data_whose_dir_is_recorded_nowhere_is_said_as_local(tmp_path):
    """No data_dir in the record, the config or the overrides: `local`, not `local:None`."""
    write_run(tmp_path, "r0", data_source="local", metrics={"test/acc": 0.9})
    (run,) = collect.find_runs(tmp_path)
    assert run.settings["data_source"] == "local"
    assert "Data: local." in report.write_report(tmp_path)["markdown"].read_text()


def test_a_value_typed_two_ways_is_one_variant(tmp_path):
    """optimizer.lr=1e-3 and optimizer.lr=0.001 compose one config: the composed value counts."""
    for seed, lr in enumerate(("1e-3", "0.001")):
        write_run(
            tmp_path,
            f"lr_{seed}",
            seed=seed,
            overrides=[f"optimizer.lr={lr}", f"seed={seed}"],
            metrics={"test/acc": 0.8, "test/loss": 1},  # a JSON integer is a metric too
            config={"optimizer": {"lr": 0.001}, "seed": seed},
        )
    runs = collect.find_runs(tmp_path)
    assert [r.variant for r in runs] == [{}, {}]
    assert [r.settings["optimizer.lr"] for r in runs] == ["0.001", "0.001"]
    assert [r.metrics["test/loss"] for r in runs] == [1.0, 1.0]
    (row,) = variant_rows(report.write_report(tmp_path)["markdown"].read_text())
    assert row[:3] == ["all runs", "0,1", "2/2"]


def test_repeated_seed_counts_once_the_latest(tmp_path):
    for name, seed, acc, started in (
        ("a_seed0", 0, 0.9, "2026-01-02T00:00:00"),
        ("b_seed0_rerun", 0, 0.7, "2026-01-03T00:00:00"),
        ("c_seed1", 1, 0.8, "2026-01-01T00:00:00"),
    ):
        write_run(
            tmp_path,
            name,
            seed=seed,
            overrides=[f"seed={seed}"],
            metrics={"test/acc": acc},
            started_at=started,
        )
    written = report.write_report(tmp_path)
    (row,) = variant_rows(written["markdown"].read_text())
    assert row[1:] == [
        "0,1",
        "2/2 (a_seed0 repeats seed 0, not counted)",
        f"{statistics.mean([0.7, 0.8]):.4f} ± {statistics.stdev([0.7, 0.8]):.4f}",
    ]
    rows = {r["run"]: r for r in csv.DictReader(written["csv"].open())}
    assert rows["a_seed0"]["repeat_of"] == "b_seed0_rerun" and rows["c_seed1"]["repeat_of"] == ""


def test_repeated_seed_counts_once_in_the_bag_size_and_val_plots(tmp_path):
    for name, seed, acc, started in (
        ("a_seed0", 0, 0.9, "2026-01-02T00:00:00"),
        ("b_seed0_rerun", 0, 0.7, "2026-01-03T00:00:00"),
        ("c_seed1", 1, 0.8, "2026-01-01T00:00:00"),
    ):
        write_run(
            tmp_path, name, seed=seed, metrics=bag_metrics(acc), started_at=started,
            history=curve(acc),
        )  # fmt: skip
    runs = collect.find_runs(tmp_path)
    (curve_,) = report.bag_size_curves(runs).values()
    assert curve_[1] == pytest.approx([0.72, 0.82])  # b and c; a repeats b's seed
    (lines,) = report.val_curves(runs).values()  # the curves too (the legend said n=3)
    assert len(lines) == 2


def test_a_failed_seed_run_again_counts_once(tmp_path):
    """Seed 1 failed (out of memory, killed) and was run again: 2 seeds, both completed."""
    for name, status, seed, acc, started in (
        ("a_seed0", "completed", 0, 0.8, "2026-01-01T00:00:00"),
        ("b_seed1", "failed", 1, None, "2026-01-01T00:00:00"),
        ("c_seed1_again", "completed", 1, 0.9, "2026-01-02T00:00:00"),
    ):
        metrics = {"test/acc": acc} if acc else None
        write_run(tmp_path, name, status, seed=seed, metrics=metrics, started_at=started)
    (row,) = variant_rows(report.write_report(tmp_path)["markdown"].read_text())
    assert row[1:3] == ["0,1", "2/2 (b_seed1 repeats seed 1, not counted)"]
    assert row[3] == f"{statistics.mean([0.8, 0.9]):.4f} ± {statistics.stdev([0.8, 0.9]):.4f}"


def test_a_completed_seed_run_again_and_failed_still_counts(tmp_path):
    """A seed that completed, then failed when run again: the completed run counts, not the
    failure started after it (the row read 0/1, the seed's result dropped)."""
    for name, status, started in (
        ("a_seed0", "completed", "2026-01-01T00:00:00"),
        ("b_seed0_again", "failed", "2026-01-02T00:00:00"),
    ):
        metrics = {"test/acc": 0.8} if status == "completed" else None
        write_run(tmp_path, name, status, seed=0, metrics=metrics, started_at=started)
    (row,) = variant_rows(report.write_report(tmp_path)["markdown"].read_text())
    assert row[1:] == ["0", "1/1 (b_seed0_again repeats seed 0, not counted)", "0.8000"]


def test_explicit_default_is_the_same_variant_as_the_implicit_one(tmp_path):
    choices = {"model": "lstm_attn", "scorer": "additive", "scheduler": None}
    config = {"model": {"hidden_size": 256}, "scorer": {"_target_": "Additive"}}
    for name, seed, overrides, scorer in (
        ("explicit", 0, ["scorer=additive", "model.hidden_size=256"], "additive"),
        ("implicit", 1, [], "additive"),
        ("dot", 0, ["scorer=dot"], "dot"),
    ):
        write_run(
            tmp_path,
            name,
            seed=seed,
            overrides=overrides,
            metrics={"test/acc": 0.8},
            choices={**choices, "scorer": scorer},
            config=config,
            data_source="sample",
        )
    # Failed before recording its choices and data: the choices are in Hydra's hydra.yaml.
    failed = write_run(tmp_path, "failed", "failed", seed=2, config=config, error="boom")
    OmegaConf.save(
        {"hydra": {"runtime": {"choices": {**choices, "hydra/launcher": "basic"}}}},
        failed / ".hydra" / "hydra.yaml",
    )
    runs = collect.find_runs(tmp_path)
    assert [r.variant for r in runs] == [
        {"scorer": s} for s in ("dot", "additive") + ("additive",) * 2
    ]
    rows = variant_rows(report.write_report(tmp_path)["markdown"].read_text())
    assert [row[:3] for row in rows] == [["dot", "0", "1/1"], ["additive", "0,2,1", "2/3 (failed)"]]


def test_settings_are_shown_as_typed_on_a_command_line(tmp_path):
    """true/false/null as Hydra reads them, not Python's True/False/None; an empty group in one
    config and none in another are the same config."""
    for seed, norm in enumerate((True, False)):
        write_run(
            tmp_path,
            f"norm_{seed}",
            seed=seed,
            overrides=[f"model.pooled_norm={str(norm).lower()}", f"seed={seed}"],
            metrics={"test/acc": 0.8},
            config={"model": {"pooled_norm": norm}, "seed": seed},
        )
    runs = collect.find_runs(tmp_path)
    assert [r.variant for r in runs] == [{"model.pooled_norm": v} for v in ("true", "false")]
    for seed in (0, 1):
        config = {"model": {"hidden_size": 8}, **({"extra": {}} if seed else {})}
        write_run(tmp_path / "same", f"s{seed}", seed=seed, config=config)
    assert [r.variant for r in collect.find_runs(tmp_path / "same")] == [{}, {}]


def test_a_tie_in_start_time_counts_the_last_listed(tmp_path):
    for name in ("a_first", "b_second"):  # no started_at recorded: a tie
        write_run(tmp_path, name, seed=0, metrics={"test/acc": 0.8})
    runs = collect.find_runs(tmp_path)
    assert [r.repeat_of for r in runs] == ["b_second", ""]


def test_a_run_resumed_to_train_longer_is_not_averaged_with_shorter_ones(tmp_path):
    """`resume=<run> trainer.max_epochs=2`: that attempt's config is in .hydra/resume_<time>/."""
    for seed in (0, 1, 2):
        write_run(
            tmp_path,
            f"seed{seed}",
            seed=seed,
            overrides=[f"seed={seed}", "trainer.max_epochs=1"],
            metrics={"test/acc": 0.5 + seed / 10},
            config={"seed": seed, "trainer": {"max_epochs": 1}},
        )
    resumed = tmp_path / "seed2"
    record = json.loads((resumed / "metrics.json").read_text())
    record["overrides"] = ["seed=2", "trainer.max_epochs=2", f"resume={resumed}"]
    (resumed / "metrics.json").write_text(json.dumps(record))
    for attempt, epochs in (("resume_2026-01-01_00-00-00", 1), ("resume_2026-01-02_00-00-00", 2)):
        (resumed / ".hydra" / attempt).mkdir()
        config = {"seed": 2, "trainer": {"max_epochs": epochs}}
        OmegaConf.save(config, resumed / ".hydra" / attempt / "config.yaml")
    runs = {run.name: run.variant for run in collect.find_runs(tmp_path)}
    assert runs == {
        "seed0": {"trainer.max_epochs": "1"},
        "seed1": {"trainer.max_epochs": "1"},
        "seed2": {"trainer.max_epochs": "2"},
    }
    rows = variant_rows(report.write_report(tmp_path)["markdown"].read_text())
    assert [row[:3] for row in rows] == [["1", "0,1", "2/2"], ["2", "2", "1/1"]]


def test_nan_metric_does_not_crash_and_is_counted(tmp_path):
    for seed, acc in enumerate((0.8, 0.9, float("nan"))):
        write_run(
            tmp_path,
            f"run{seed}",
            seed=seed,
            metrics={"test/acc": acc, "test/acc_bag1": acc},
            history=curve(acc),
        )
    written = report.write_report(tmp_path)
    (row,) = variant_rows(written["markdown"].read_text())
    assert row[3] == f"0.8500 ± {statistics.stdev([0.8, 0.9]):.4f} (+1 NaN/inf)"
    assert tables.mean_std([float("nan")]) == "nan"
    assert tables.mean_std([0.8, float("inf")]) == "0.8000 (+1 NaN/inf)"  # one finite: no std
    assert written["bag_size"].stat().st_size > 1000


def test_running_means_the_run_dir_lock_is_held(tmp_path):
    """A killed run's pid may be taken by a new process (here: this one, alive), so a live pid
    says nothing: only a held lock says a run is at work, on whatever machine."""
    alive_pid = {"pid": os.getpid(), "host": platform.node()}
    write_run(tmp_path, "pid_reused", status="running", history=curve(0.5), **alive_pid)
    write_run(tmp_path, "elsewhere", status="running", pid=1, host="other-machine")
    write_run(tmp_path, "at_work", status="running", **alive_pid)
    with owning(tmp_path / "at_work", "train"):
        rows = list(csv.DictReader(report.write_report(tmp_path)["csv"].open()))
    statuses = {r["run"]: r["status"] for r in rows}
    assert statuses == {"pid_reused": "killed", "elsewhere": "killed", "at_work": "running"}


def test_names_in_natural_order():
    names = ["test/acc_bag10", "test/acc_bag2", "test/acc", "10_seed=1", "9_seed=0"]
    assert sorted(names, key=natural_key) == [
        "9_seed=0",
        "10_seed=1",
        "test/acc",
        "test/acc_bag2",
        "test/acc_bag10",
    ]


def test_the_machines_the_runs_ran_on_are_named(tmp_path):
    zen = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "torch_threads": 1, "torch": "2.13.0"}
    skylake = {**zen, "cpu": "Intel Xeon", "cpu_capability": "AVX2", "commit": "abc"}
    write_run(tmp_path, "a", seed=0, machine=zen, metrics={"test/acc": 0.9})
    write_run(tmp_path, "b", seed=1, machine=zen, metrics={"test/acc": 0.8})
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert "Machine: AMD EPYC, AVX512, 1 torch thread, torch 2.13.0." in text
    assert "| machine |" not in text  # one machine: no column for it

    write_run(tmp_path, "c", seed=2, machine=skylake, metrics={"test/acc": 0.7})
    write_run(tmp_path, "d", seed=3, metrics={"test/acc": 0.6})  # written before runs said
    written = report.write_report(tmp_path)
    text = written["markdown"].read_text()
    assert (
        "The runs ran on 3 machines: AMD EPYC, AVX512, 1 torch thread, torch 2.13.0 (2 runs); "
        "Intel Xeon, AVX2, 1 torch thread, torch 2.13.0 (1 run); not recorded (1 run)."
    ) in text
    runs = [line for line in text.splitlines() if line.startswith("| c |")]
    assert runs[0].endswith("| Intel Xeon, AVX2, 1 torch thread, torch 2.13.0 |")
    rows = {r["run"]: r for r in csv.DictReader(written["csv"].open())}
    assert rows["c"]["commit"] == "abc" and rows["d"]["machine"] == "not recorded"
    # machines are not variants: the four seeds are averaged together
    assert "| all runs | 0,1,2,3 | 4/4 | 0.7500 ± 0.1291 |" in text


def test_runs_of_other_configs_are_never_averaged_nor_counted_as_repeats(tmp_path):
    """The lr changed in the yaml between two pairs of runs with the same command: the report
    averaged all four as one variant (and with the same seeds, dropped two as repeats)."""
    for seed, lr, acc in ((0, 0.001, 0.9), (1, 0.001, 0.92), (0, 0.5, 0.5), (1, 0.5, 0.52)):
        config = {"seed": seed, "optimizer": {"lr": lr}, "paths": {"log_dir": f"/x/{seed}"}}
        write_run(tmp_path, f"lr{lr}_s{seed}", seed=seed, metrics=bag_metrics(acc), config=config)
    runs = collect.find_runs(tmp_path)
    assert {r.variant_label for r in runs} == {"optimizer.lr=0.001", "optimizer.lr=0.5"}
    assert not any(r.repeat_of for r in runs)  # paths and seed never split a variant


def test_runs_on_changed_data_files_are_never_averaged(tmp_path):
    for seed, digest in ((0, "1111aaaa1111aaaa"), (1, "1111aaaa1111aaaa"), (2, "2222bbbb2222bbbb")):
        write_run(
            tmp_path,
            f"s{seed}",
            seed=seed,
            metrics=bag_metrics(0.9),
            data_source="local",
            data_dir="/data",
            data_hash=digest,
        )
    write_run(
        tmp_path, "old", seed=3, metrics=bag_metrics(0.9), data_source="local", data_dir="/data"
    )
    labels = {r.name: r.variant_label for r in collect.find_runs(tmp_path)}
    assert labels["s0"] == labels["s1"] == "data_hash=1111aaaa"
    assert labels["s2"] == "data_hash=2222bbbb"
    assert labels["old"] == "data_hash=-"  # recorded before the hash: not taken for either


def test_variants_that_ran_one_config_are_said(tmp_path):
    """experiment=bag/table scorer=dot: every row ran the dot scorer under its own name."""
    for row in ("dot", "bilinear"):
        for seed in (0, 1):
            config = {  # seed and paths differ between runs of one config
                "model": {"hidden_size": 8},
                "scorer": {"_target_": "dot"},
                "seed": seed,
                "paths": {"log_dir": f"/logs/{row}_s{seed}"},
            }
            write_run(
                tmp_path,
                f"{row}_s{seed}",
                seed=seed,
                overrides=[f"+experiment/bag={row}", f"seed={seed}"],
                metrics=bag_metrics(0.9),
                config=config,
            )
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert "**One config under 2 names:** bag=bilinear, bag=dot ran one and the same" in text


def test_runs_without_the_main_metrics_show_the_ones_they_have(tmp_path):
    """The tables show the main metrics where there are any; runs without them (a task of its
    own, say) are not left with no metric column."""
    for seed, loss in enumerate((0.5, 0.7)):
        write_run(tmp_path, f"r{seed}", seed=seed, metrics={"test/loss": loss})
    text = report.write_report(tmp_path)["markdown"].read_text()
    (row,) = variant_rows(text)
    assert "| test/loss |" in text and row[3] == f"0.6000 ± {statistics.stdev([0.5, 0.7]):.4f}"


def test_files_in_a_runs_own_subfolders_are_never_runs(tmp_path):
    """checkpoints/, tb/, .hydra/ ... hold no run records: a metrics.json copied there (or
    another tool's) is no run inside the run."""
    run_dir = write_run(tmp_path, "r0", metrics={"test/acc": 0.7})
    for folder in collect.SKIP_DIRS:
        (run_dir / folder).mkdir(exist_ok=True)
        (run_dir / folder / "metrics.json").write_text((run_dir / "metrics.json").read_text())
    assert [r.name for r in collect.find_runs(tmp_path)] == ["r0"]


def test_an_unreadable_record_does_not_make_every_setting_a_column(sweep):
    (sweep / "9_broken").mkdir()
    (sweep / "9_broken" / "metrics.json").write_text("{")
    runs = collect.find_runs(sweep)
    assert {tuple(r.variant) for r in runs} == {("scorer",)}


def test_more_than_ten_variants_keep_distinct_lines():
    from attnexp.viz.report import variant_style

    styles = [tuple(variant_style(i).values()) for i in range(40)]
    assert len(set(styles)) == 40  # colours repeat after 10, with another line style


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The axes a report figure drew, kept instead of written."""
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *args, **kwargs: figures.append(self))

    def draw(plot, curves):
        plot(curves, tmp_path / "figure.png")
        return figures[-1].axes[0]

    return draw


def test_val_curves_name_each_variant_once_with_its_run_count(drawn):
    """One line per run, one legend entry per variant: a legend entry per seed repeats names."""
    ax = drawn(
        plot_val_curves, {"dot": [[(0, 0.5), (1, 0.6)], [(0, 0.4)]], "additive": [[(0, 0.7)]]}
    )
    assert len(ax.lines) == 3
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["dot (n=2)", "additive (n=1)"]


def test_bag_size_curves_show_the_seeds_spread(drawn):
    """Mean accuracy per bag size with +- one standard deviation over seeds (none for one seed)."""
    ax = drawn(plot_bag_sizes, {"dot": {1: [0.9, 1.0], 3: [0.8, 0.8]}, "mlp": {1: [0.5]}})
    (dot, _, (bars,)), (_, _, (single,)) = ax.containers
    assert dot.get_ydata().tolist() == pytest.approx([0.95, 0.8])
    spreads = [segment[1, 1] - segment[0, 1] for segment in bars.get_segments()]
    assert spreads == pytest.approx([2 * statistics.stdev([0.9, 1.0]), 0.0])
    assert [segment[1, 1] - segment[0, 1] for segment in single.get_segments()] == [0.0]


def test_curves_are_drawn_left_to_right_whatever_order_the_records_give(drawn):
    """A resumed run's history, or metrics.json's key order (acc_bag10 before acc_bag3), does not
    make a line double back."""
    line = drawn(plot_val_curves, {"dot": [[(2, 0.7), (0, 0.5), (1, 0.6)]]}).lines[0]
    assert line.get_xdata().tolist() == [0, 1, 2]
    assert line.get_ydata().tolist() == [0.5, 0.6, 0.7]
    (dot, _, _), *_ = drawn(plot_bag_sizes, {"dot": {10: [0.6], 3: [0.9]}}).containers
    assert dot.get_xdata().tolist() == [3, 10] and dot.get_ydata().tolist() == [0.9, 0.6]


def test_each_variant_has_its_own_colour_the_same_in_both_figures(drawn):
    """Variants in the report's order (not alphabetical): a variant's colour in the validation
    curves is its colour against bag size, and each is named in the legend."""
    val = drawn(plot_val_curves, {"mlp": [[(0, 0.5)]], "dot": [[(0, 0.6)]]})
    sizes = drawn(plot_bag_sizes, {"mlp": {1: [0.5]}, "dot": {1: [0.6]}})
    val_colours = [line.get_color() for line in val.lines]
    assert len(set(val_colours)) == 2
    assert [c.lines[0].get_color() for c in sizes.containers] == val_colours
    assert [t.get_text() for t in sizes.get_legend().get_texts()] == ["mlp", "dot"]


def test_sample_and_hub_data_are_named_so_whatever_data_dir_the_config_holds(tmp_path):
    """Every composed config holds a paths.data_dir: only local data is told apart by it (a
    sample run read as `local:data`, another variant than a sample run without a config)."""
    for seed, source in enumerate(("sample", "hub", "sample")):
        config = {"paths": {"data_dir": "data"}} if seed < 2 else None
        write_run(
            tmp_path, f"r{seed}", seed=seed, data_source=source, metrics={"test/acc": 0.7},
            config=config,
        )  # fmt: skip
    runs = collect.find_runs(tmp_path)
    assert [r.settings["data_source"] for r in runs] == ["sample", "hub", "sample"]
    labels = [r.variant_label for r in runs]
    assert labels == [f"data_source={source}" for source in ("sample", "hub", "sample")]


def test_a_run_without_a_config_beside_runs_whose_configs_differ(tmp_path):
    """A run that failed before Hydra wrote its config, among runs whose configs differ where no
    override says so: it is read as the others are, its config values unknown."""
    for seed, lr in ((0, 0.001), (1, 0.5)):
        config = {"seed": seed, "model": {"hidden_size": 8}, "optimizer": {"lr": lr}}
        write_run(tmp_path, f"lr{lr}", seed=seed, metrics={"test/acc": 0.9}, config=config)
    write_run(tmp_path, "no_config", "failed", seed=2)
    runs = {r.name: r.variant for r in collect.find_runs(tmp_path)}
    assert runs == {
        "lr0.001": {"optimizer.lr": "0.001"},
        "lr0.5": {"optimizer.lr": "0.5"},
        "no_config": {"optimizer.lr": "-"},
    }


def test_variants_whose_configs_are_not_recorded_are_never_said_to_be_one_config(sweep):
    """Records without a .hydra/config.yaml (older runs, or copied without it) say nothing of
    their config: the scorer variants of the sweep are not "one config under 3 names"."""
    text = report.write_report(sweep)["markdown"].read_text()
    assert "One config under" not in text
    assert collect.same_config_variants(collect.find_runs(sweep)) == []


def test_runs_are_listed_in_natural_order_of_their_dirs(tmp_path):
    """Job 10 of a sweep comes after job 9, not between jobs 1 and 2 as in a string sort."""
    for num in (1, 2, 10):
        write_run(tmp_path, f"{num}_seed={num}", seed=num, metrics={"test/acc": 0.7})
    rows = csv.DictReader(report.write_report(tmp_path)["csv"].open())
    assert [row["run"] for row in rows] == ["1_seed=1", "2_seed=2", "10_seed=10"]


def test_a_run_linked_twice_is_one_run(sweep, tmp_path):
    """A hand-picked folder with two links to one run dir: the run is read once, by the link
    whose name comes first (whatever order the file system lists them in), not as a repeat of
    itself."""
    picked = tmp_path / "picked"
    picked.mkdir()
    for link in ("b", "a"):
        (picked / link).symlink_to(sweep / "0_scorer=dot,seed=0", target_is_directory=True)
    (run,) = collect.find_runs(picked)
    assert run.name == "a" and not run.repeat_of


def test_a_run_without_hydra_files_is_read_without_a_warning(tmp_path, caplog):
    """No .hydra/ (a run copied without it, an older record) is nothing to warn of: a warning
    per run buried the ones that matter."""
    write_run(tmp_path, "r0", metrics={"test/acc": 0.7})
    with caplog.at_level("WARNING", logger="attnexp.runs.collect"):
        (run,) = collect.find_runs(tmp_path)
    assert run.config is None and caplog.records == []


def table_rows(text, first_cell):
    """The cells of report.md's table lines whose first cell is `first_cell`."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(f"| {first_cell} |")
    ]


def test_the_tables_show_the_main_metrics_and_the_csv_every_metric(sweep):
    """report.md's tables hold the main metrics only (per-bag-size accuracies would make them
    unreadably wide); report.csv holds every metric."""
    written = report.write_report(sweep)
    text = written["markdown"].read_text()
    (runs_header,) = table_rows(text, "run")
    assert runs_header == ["run", "status", "seed", "scorer", "epochs"] + [
        "val/acc_best", "val/acc", "test/acc", "note"
    ]  # fmt: skip
    (variants_header,) = table_rows(text, "scorer")
    assert variants_header == [
        "scorer",
        "seeds",
        "completed",
        "val/acc_best",
        "val/acc",
        "test/acc",
    ]
    assert "test/acc_bag1" not in text and "val/acc_last" not in text
    header = written["csv"].read_text().splitlines()[0].split(",")
    assert {"test/acc_bag1", "test/acc_bag6", "val/acc_last"} <= set(header)


def test_a_metric_a_run_lacks_is_an_empty_cell(sweep):
    """The failed run recorded no metric: its cells are empty, not `None`."""
    text = report.write_report(sweep)["markdown"].read_text()
    (failed,) = table_rows(text, "4_scorer=bilinear,seed=0")
    assert failed[5:8] == ["", "", ""] and "None" not in text


def test_the_report_shows_its_plots_and_says_when_the_data_is_not_recorded(sweep):
    """report.md links the PNGs it wrote beside it; records that name no data (written before
    runs recorded it) say so, not `Data: None.`"""
    text = report.write_report(sweep)["markdown"].read_text()
    assert "![Validation accuracy per epoch](val_acc.png)" in text
    assert "![Test accuracy against bag size](acc_vs_bag_size.png)" in text
    assert "Data: not recorded." in text


def test_runs_on_two_machines_name_theirs_in_the_runs_table(tmp_path):
    """Two machines are already more than one: each run's row says which it ran on."""
    zen = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "torch_threads": 1, "torch": "2.13.0"}
    write_run(tmp_path, "a", seed=0, machine=zen, metrics={"test/acc": 0.9})
    write_run(tmp_path, "b", seed=1, metrics={"test/acc": 0.8})  # written before runs said
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert "The runs ran on 2 machines:" in text
    assert table_rows(text, "run")[0][-2:] == ["note", "machine"]
    assert table_rows(text, "b")[0][-1] == "not recorded"


def test_one_variant_is_headed_variant_and_an_evaluation_shows_the_main_metrics(tmp_path):
    """Runs that vary nothing are one row under a `variant` column; an evaluation record's
    per-bag-size accuracies stay out of its table as a run's do."""
    write_run(tmp_path, "r0", metrics=bag_metrics(0.9))
    write_run(tmp_path, "e0", kind="evaluate", run_dir="/runs/r0", metrics=bag_metrics(0.8))
    text = report.write_report(tmp_path)["markdown"].read_text()
    assert table_rows(text, "variant") == [["variant", "seeds", "completed"] + [
        "val/acc_best", "val/acc", "test/acc"
    ]]  # fmt: skip
    (evaluations_header,) = table_rows(text, "record")
    assert evaluations_header[4:] == ["val/acc_best", "val/acc", "test/acc", "note"]


def test_an_out_dir_whose_parent_is_missing_is_made(sweep, tmp_path):
    """--out reports/today where reports/ is not there yet: made, as `mkdir -p` would."""
    written = report.write_report(sweep, tmp_path / "reports" / "today")
    assert written["markdown"] == tmp_path / "reports" / "today" / "report.md"


def test_beyond_forty_variants_the_styles_repeat_without_failing():
    """Colours and line styles cycle: a report of more than 40 variants still draws."""
    from attnexp.viz.report import LINESTYLES, variant_style

    styles = [variant_style(i) for i in range(100)]
    assert {s["linestyle"] for s in styles} == set(LINESTYLES)
    assert styles[40] == styles[0]


def test_both_figures_name_their_axes_and_count_whole_epochs_and_bag_sizes(drawn):
    """An axis without its name, or at epoch 0.5, reads as something else."""
    val = drawn(plot_val_curves, {"dot": [[(0, 0.5), (1, 0.6), (2, 0.7)]]})
    sizes = drawn(plot_bag_sizes, {"dot": {1: [0.9], 3: [0.8]}})
    assert (val.get_xlabel(), val.get_ylabel()) == ("epoch", "validation accuracy")
    assert (sizes.get_xlabel(), sizes.get_ylabel()) == ("digits per bag (test)", "test accuracy")
    for ax in (val, sizes):
        assert all(tick == int(tick) for tick in ax.get_xticks())


def test_translation_runs_show_bleu_and_chrf_in_tables_and_plots(tmp_path):
    """Translation runs log BLEU/chrF, not accuracy: the tables show them, val BLEU is plotted."""
    for scorer, bleu in (("additive", 20.0), ("dot", 15.0)):
        for seed in (0, 1):
            score = bleu + seed
            write_run(
                tmp_path,
                f"{scorer}_{seed}",
                seed=seed,
                overrides=[f"scorer={scorer}", f"seed={seed}"],
                metrics={
                    "val/bleu_best": score,
                    "val/bleu": score,
                    "test/bleu": score - 1,
                    "test/bleu_greedy": score - 2,
                    "test/chrf": 2 * score,
                    "test/ppl": 9.5,
                    "test/ppl_free": 30.5,
                },
                history=[
                    {"epoch": i, "step": i + 1, "val/bleu": b, "val/loss": 3.0}
                    for i, b in enumerate((score / 2, score))
                ],
            )
    written = report.write_report(tmp_path)
    assert "val_acc" not in written  # no run logged val/acc
    assert written["val_bleu"].read_bytes()[:4] == b"\x89PNG"
    text = written["markdown"].read_text()
    assert "![Validation BLEU per epoch](val_bleu.png)" in text
    (variants,) = [t for t in text.split("## ") if t.startswith("Variants")]
    header, _, *rows = [line for line in variants.splitlines() if line.startswith("|")]
    for metric in ("val/bleu_best", "test/bleu", "test/chrf", "test/ppl", "test/ppl_free"):
        assert metric in header
    (additive,) = [r for r in rows if r.startswith("| additive")]
    cells = [c.strip() for c in additive.split("|")]
    assert cells[header.split("|").index(" test/bleu ")] == "19.5000 ± 0.7071"
    assert cells[header.split("|").index(" test/chrf ")] == "41.0000 ± 1.4142"
    csv_header = written["csv"].read_text().splitlines()[0].split(",")
    assert "test/bleu_greedy" in csv_header  # the CSV keeps every metric
