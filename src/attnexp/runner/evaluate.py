"""The work of `python -m attnexp.evaluate` (see `attnexp.evaluate`, its command line): rebuild a
run's data, model and task from its saved config, test a checkpoint, and record the metrics.

Kept apart from the command line, which answers `--help` and refuses a bad key before torch and
Lightning are imported.
"""

import re
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from attnexp.data.base import AttnDataModule, changed_splits
from attnexp.errors import ConfigError, require_seed
from attnexp.runner.build import build, check_data_dir, given, resolved_data_dir
from attnexp.runner.config import register_resolvers
from attnexp.runner.final_metrics import scalar_metrics
from attnexp.runner.load import (
    given_ckpt_path,
    load_run,
    load_weights,
    longer_than_trained,
    read_run_record,
    read_weights,
    run_settings_hint,
)
from attnexp.runner.steps import check_kernels, record_data, recording, warn_about_data
from attnexp.runner.trainer import (
    TRAINER_REFUSALS,
    check_cpu_precision,
    device_name,
    refused_settings,
)
from attnexp.runs.overrides import override_key
from attnexp.runs.record import METRICS_FILE, RunRecord

register_resolvers()


def run_overrides(cfg: DictConfig, cli_overrides: list[str]) -> list[str]:
    """Overrides for the run's config: an explicit paths.data_dir=, then `overrides=[...]`; a
    data dir given either way must exist."""
    extra = (
        [f"paths.data_dir={cfg.paths.data_dir}"] if given("paths.data_dir", cli_overrides) else []
    )
    overrides = extra + [str(o) for o in cfg.overrides]
    for override in overrides:
        if override_key(override) == "paths.data_dir":
            check_data_dir(override.split("=", 1)[1], [override])
    return overrides


def check_same_data(source: str, run_record: dict, run_cfg: DictConfig, overrides: list[str]):
    """Test on the kind of data the run was tested on (local files, hub, embedded sample), unless
    `data.source=` asks for another on purpose."""
    recorded = run_record.get("data_source")
    if recorded and source != recorded and not given("data.source", overrides):
        raise ConfigError(
            f"the run was tested on {recorded} data, this evaluation reads {source} data "
            f"(paths.data_dir={run_cfg.paths.data_dir}): give paths.data_dir=<the folder the run "
            f"used>, or 'overrides=[\"data.source={source}\"]' to evaluate on it anyway"
        )


def evaluate(cfg: DictConfig, out_dir: Path, cli_overrides: list[str]) -> dict:
    """Rebuild the run, test its checkpoint, record the metrics (with the run's own beside them)."""
    overrides = run_overrides(cfg, cli_overrides)
    run_cfg, choices, run_dir, ckpt = load_run(given_ckpt_path(cfg), overrides, out_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise ConfigError(
            f"hydra.run.dir={out_dir} is the run dir itself; evaluate writes its own dir"
        )
    run_record, weights = read_run_record(run_dir), read_weights(ckpt)
    if run_cfg.seed is None:
        raise ConfigError(
            f"{run_dir} ran with seed=null, and its {METRICS_FILE} records no drawn seed: its test "
            f"data cannot be made again (give 'overrides=[\"seed=<the seed it drew>\"]')"
        )
    record = RunRecord(
        out_dir,
        seed=run_cfg.seed,
        overrides=cli_overrides,
        extra={"kind": "evaluate", "run_dir": str(run_dir), "ckpt": str(ckpt)},
    )
    with recording(record):
        longer = longer_than_trained(run_dir, run_cfg)
        if longer is not None:
            record.warn(longer)
        require_seed("seed", cfg.seed)
        pl.seed_everything(cfg.seed if cfg.seed is not None else run_cfg.seed, workers=True)
        # Built now: a trainer.* setting Lightning refuses is said before any data is loaded.
        trainer = make_test_trainer(cfg, run_cfg, out_dir)
        datamodule, task = build_checked_data(run_cfg, choices, run_dir, run_record, overrides)
        record_data(
            record,
            datamodule,
            resolved_data_dir(run_cfg.paths.data_dir),  # as train records it
            choices=choices,
        )
        warn_changed_data(record, run_record, datamodule)
        check_same_data(datamodule.source, run_record, run_cfg, overrides)
        warn_about_data(record, datamodule, "evaluated")
        check_kernels(trainer, task)
        load_weights(task, ckpt, weights)
        record.update(device=device_name(trainer))
        note = multi_process_test_note(
            run_record.get("device"), run_cfg.trainer.get("limit_test_batches")
        )
        if note is not None:
            record.warn(note)
        trainer.test(task, datamodule=datamodule)
        metrics = scalar_metrics(trainer.callback_metrics)
        for note in task.notes:
            record.warn(note)
    record.update(run_metrics=run_record.get("metrics", {}))
    best = run_record.get("best_ckpt")
    if best and (run_dir / best).resolve() != ckpt.resolve():
        record.update(run_metrics_ckpt=best)  # the summary's run column says whose they are
    record.complete(metrics)
    return record.data


def build_checked_data(
    run_cfg: DictConfig, choices: dict, run_dir: Path, run_record: dict, overrides: list[str]
) -> tuple[AttnDataModule, pl.LightningModule]:
    """The run's DataModule and task, rebuilt; local or sample data is checked against the run's
    before it is loaded."""

    def check_planned_data(datamodule: AttnDataModule) -> None:
        # "hub" may still fall back to the sample: that is checked once the data is loaded
        planned = datamodule.planned_source()
        if planned in ("local", "sample"):
            check_same_data(planned, run_record, run_cfg, overrides)

    with run_settings_hint("evaluate"):
        return build(run_cfg, choices, artifacts_dir=str(run_dir), before_setup=check_planned_data)


def warn_changed_data(record: RunRecord, run_record: dict, datamodule: AttnDataModule) -> None:
    """Splits whose content differs from what the run read, as a warning of the record."""
    changed = changed_splits(run_record.get("data_fingerprints"), datamodule.fingerprints)
    if not changed:
        return
    picked = ", and its best checkpoint was picked on other validation data"
    record.warn(
        f"data: the {' and '.join(changed)} data differ from the run's (the data files "
        f"changed since it trained?): this evaluation and the run's own metrics are of "
        f"different data" + (picked if "val" in changed else "")
    )


def multi_process_test_note(run_device: str | None, limit: int | float | None) -> str | None:
    """What differs from a run that tested under DDP (its `device` ends " x<processes>"); `limit`:
    the run's trainer.limit_test_batches."""
    match = re.search(r" x(\d+)$", run_device or "")
    if match is None:
        return None
    ranks = int(match.group(1))
    note = (
        f"the run tested in {ranks} processes ({run_device}), each on its share of the test set "
        f"padded to equal sizes (for text, up to {ranks - 1} test example(s) counted twice)"
    )
    if type(limit) is int:
        note += f" and trainer.limit_test_batches={limit} per process ({ranks * limit} in all)"
    return f"{note}; this evaluation tests in one process, so its metrics may differ from the run's"


def make_test_trainer(cfg: DictConfig, run_cfg: DictConfig, out_dir: Path) -> pl.Trainer:
    """The Trainer that tests, from evaluate's trainer.* (the run's where null); Lightning refuses
    a bad one with a traceback, and takes limit_test_batches=0 as "test nothing"."""
    settings = {
        "accelerator": cfg.trainer.accelerator,
        "devices": cfg.trainer.devices,
        "precision": cfg.trainer.precision or run_cfg.trainer.precision,
        "limit_test_batches": cfg.trainer.limit_test_batches
        if cfg.trainer.limit_test_batches is not None
        else run_cfg.trainer.get("limit_test_batches"),
    }
    check_cpu_precision(settings["precision"], str(settings["accelerator"]), "trainer.precision")
    devices = settings["devices"]
    if devices not in (1, "1") and not (OmegaConf.is_list(devices) and len(devices) == 1):
        # DDP would split the test set over processes, padded to equal shares: examples counted
        # twice, and for a relaunching strategy a second evaluate writing the same eval dir
        raise ConfigError(
            f"trainer.devices={settings['devices']}: evaluate tests in one process, to give the "
            f"run's metrics again (with more, each process tests a share of the test set padded "
            f"to equal sizes, counting some examples twice); set trainer.devices=1"
        )
    limit = settings["limit_test_batches"]
    if limit is not None and (type(limit) not in (int, float) or limit <= 0):
        # null takes the run's own, so a run trained with 0 (no test) needs a value given here
        given_here = cfg.trainer.limit_test_batches is not None
        whose = "" if given_here else " (the run's own: it tested nothing)"
        raise ConfigError(
            f"trainer.limit_test_batches={limit!r}{whose} must be a number of batches >= 1 or a "
            f"fraction in (0, 1] (set trainer.limit_test_batches=1.0 to test every batch)"
        )
    try:
        return pl.Trainer(
            **settings,
            enable_progress_bar=cfg.trainer.enable_progress_bar,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=str(out_dir),
        )
    except TRAINER_REFUSALS as err:
        raise refused_settings(err, "trainer", "evaluate") from err
