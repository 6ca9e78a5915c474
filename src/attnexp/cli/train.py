"""`python -m attnexp <overrides>`: the training command's Hydra entry point and exit status.

Only Hydra and the config helpers are imported here, so what Hydra answers without running a job
(`--help`, `--cfg job`, `--info`, shell completion, an unknown option or key) takes a fraction of
a second. torch and Lightning come with `attnexp.runner.train`, imported once a run starts.
"""

import importlib.util
import logging
import sys
import warnings

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from attnexp.cli.overrides import first_job_config, quote_equals_values, unknown_keys
from attnexp.errors import ConfigError, exit_with
from attnexp.runner.config import register_resolvers
from attnexp.runner.settings import check_values
from attnexp.runs.naming import natural_key
from attnexp.runs.ranks import is_other_rank
from attnexp.runs.sweeps import FAILED_JOBS

log = logging.getLogger(__name__)
register_resolvers()
# conf/hydra/launcher/submitit_local.yaml takes the name of the submitit plugin's own config, and
# Hydra warns (three times a command) that it checks the file against that schema: it sets every
# key of the schema, so it composes alike with or without the check.
warnings.filterwarnings(
    "ignore", message=r"\s*'hydra/launcher/submitit_local' is validated against ConfigStore schema"
)


@hydra.main(version_base="1.3", config_path="pkg://attnexp.conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from attnexp.runner.train import run  # torch and Lightning: not for what Hydra answers alone

    try:
        metrics = run(cfg)
    except Exception as err:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            if isinstance(err, ConfigError):
                exit_with(err)
            raise
        # One failed job must not end the sweep: it is recorded (status=failed) and counted.
        job = HydraConfig.get().job.num
        if isinstance(err, ConfigError):  # the user's settings: the message says it all
            log.error("job %s failed; the sweep goes on. error: %s", job, err)
        else:
            log.exception("job %s failed; the sweep goes on", job)
        FAILED_JOBS.append(HydraConfig.get().runtime.output_dir)
        return None
    if HydraConfig.get().mode == RunMode.RUN and not is_other_rank():  # one summary per run
        print(run_summary(metrics, HydraConfig.get().runtime.output_dir))
    objective = cfg.get("optimized_metric")
    return metrics.get(objective) if objective else None


# Accuracy for the classifiers, BLEU and chrF for translation.
SUMMARY_KEYS = ("test/acc", "val/acc", "test/bleu", "test/chrf", "val/bleu")


def run_summary(metrics: dict[str, float], run_dir: str) -> str:
    keys = sorted((k for k in metrics if k.startswith(SUMMARY_KEYS)), key=natural_key)
    lines = [f"  {k:<24} {metrics[k]:.4f}" for k in keys]
    return "\n".join([f"run dir: {run_dir}", *lines])


def plugin_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # not even its namespace package
        return False


def missing_sweeper(args: list[str]) -> list[str]:
    """conf/hparams_search/ options run on attnexp's Optuna sweeper, which needs Optuna (an
    extra): without it Hydra says only "Error locating target 'optuna.samplers.TPESampler'"."""
    searches = [a for a in args if a.lstrip("+").startswith("hparams_search=")]
    if not searches or plugin_installed("optuna"):
        return []
    return [
        f"{searches[0]} runs on Optuna, which is not installed: pip install -e '.[optuna]' "
        f"(from a source checkout), or pip install 'attnexp[optuna]'"
    ]


def refusals(argv: list[str]) -> list[str]:
    """What is wrong with the command line, said before Hydra makes a run dir and before torch
    loads: keys the config lacks (said once, without Hydra's advice to add them with +), and
    values no run can use (in a sweep, its first job's)."""
    messages = unknown_keys("train", argv)
    if messages:
        return messages
    cfg = first_job_config("train", argv)
    try:
        if cfg is not None:
            check_values(cfg)
    except ConfigError as err:
        return [str(err)]
    except Exception:  # a value only Hydra's run can resolve: the run's own checks judge it
        return []
    return []


def cli() -> None:
    sys.argv[1:] = quote_equals_values(sys.argv[1:])  # resume=<a sweep job's dir>, before Hydra
    messages = refusals(sys.argv[1:])
    for message in messages:
        print(f"error: {message}", file=sys.stderr)
    if messages:
        raise SystemExit(2)
    try:
        main()
    except SystemExit as end:
        # Status 1: Hydra printed an error it caught. A key it could not override gets named
        # with the keys there are (Hydra's advice, `+key=...`, would add one nothing reads).
        messages = unknown_keys("train", sys.argv[1:]) if end.code == 1 else []
        if end.code == 1 and not messages:
            messages = missing_sweeper(sys.argv[1:])
        for message in messages:
            print(f"error: {message}", file=sys.stderr)
        if messages:
            raise SystemExit(2) from None
        raise
    if FAILED_JOBS:
        print(f"{len(FAILED_JOBS)} job(s) failed:", *FAILED_JOBS, sep="\n  ", file=sys.stderr)
        sys.exit(min(len(FAILED_JOBS), 100))
