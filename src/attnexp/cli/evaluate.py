"""`python -m attnexp.evaluate ckpt_path=...`: test a trained checkpoint again, in a new eval dir.

Data, model and task are rebuilt from the run's own `.hydra/config.yaml` (plus `paths.data_dir=`
and `overrides=["key=value", ...]`), the checkpoint is tested, and `<eval dir>/metrics.json` records the
metrics next to those the run itself reported.

This module is the command line: what it answers alone (`--help`, a key evaluate.yaml lacks) takes
a fraction of a second. torch and Lightning come with `attnexp.runner.evaluate`, imported once an
evaluation starts.
"""

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from attnexp.cli.compose import compose_command_cfg
from attnexp.cli.overrides import quote_equals_values
from attnexp.errors import ConfigError, exit_with
from attnexp.runner.config import register_resolvers
from attnexp.runner.load import check_ckpt_exists
from attnexp.runs.lock import owning
from attnexp.runs.naming import natural_key
from attnexp.runs.record import METRICS_FILE, RunRecord

log = logging.getLogger(__name__)
register_resolvers()


def evaluation_summary(data: dict, out_dir: Path) -> str:
    """Each test/* metric of the evaluation next to the run's ('-' where the run has none)."""
    lines = [f"checkpoint: {data['ckpt']}", f"eval dir:   {out_dir}"]
    if data.get("run_metrics_ckpt"):
        lines.append(
            f"run:        the run's own test of its best checkpoint, {data['run_metrics_ckpt']}"
        )
    lines.append(f"  {'metric':<24} {'eval':>8} {'run':>8}")
    for key in sorted(data["metrics"], key=natural_key):
        value = data["metrics"][key]
        if key.startswith("test/"):
            before = data.get("run_metrics", {}).get(key)
            lines.append(
                f"  {key:<24} {value:8.4f} {'-' if before is None else f'{before:8.4f}':>8}"
            )
    return "\n".join(lines)


def check_command_line(argv: list[str]) -> None:
    """The overrides, checked before hydra.main composes evaluate.yaml with them: Hydra's own
    message for a run setting (`+data.x=...`) would add a key that evaluate ignores. A command
    with Hydra's flags (-m, --cfg, ...) is left to Hydra."""
    if not any(arg.startswith("-") for arg in argv):
        try:
            check_ckpt_exists(compose_command_cfg("evaluate", argv))
        except ConfigError as err:
            exit_with(err)


def record_refusal(out_dir: Path, cli_overrides: list[str], err: ConfigError) -> None:
    """A refusal before the evaluation's record exists (no checkpoint, no data dir) still leaves a
    failed metrics.json in the dir Hydra made for it, as a refused training run does. A dir that
    already holds one is never written: the evaluation's own failed record, the run dir itself."""
    if (out_dir / METRICS_FILE).exists():
        return
    record = RunRecord(out_dir, seed=None, overrides=cli_overrides, extra={"kind": "evaluate"})
    try:
        record.start()
        record.fail(err)
    except OSError as write_err:  # the refusal is what the user needs to read, not this
        log.warning("could not write the failed record into %s: %s", out_dir, write_err)


@hydra.main(version_base="1.3", config_path="pkg://attnexp.conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    from attnexp.runner.evaluate import evaluate  # torch and Lightning: not for --help or a typo

    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    cli_overrides = list(hydra_cfg.overrides.task)
    try:
        with owning(out_dir, "evaluate"):  # held while it runs: the report's `running`
            data = evaluate(cfg, out_dir, cli_overrides)
    except ConfigError as err:
        record_refusal(out_dir, cli_overrides, err)
        exit_with(err)
    print(evaluation_summary(data, out_dir))


def cli() -> None:
    sys.argv[1:] = quote_equals_values(sys.argv[1:])  # ckpt_path=<a sweep job's dir>
    check_command_line(sys.argv[1:])
    main()
