"""Readable names for the jobs of a sweep: only the overrides the sweep varies.

Hydra's `override_dirname` names a job by every override on the command line, so with fixed
settings such as `trainer.max_epochs=1` every job dir (and TensorBoard run) starts with the same
long prefix. The sweeper writes the sweep's own config (`multirun.yaml`, with the sweep
expressions) before it launches any job, so a job can tell which of its overrides were swept.
"""

import hashlib
import logging
import re
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

MAX_NAME = 160  # file systems allow 255 bytes per path component


def swept_keys(sweep_dir: str | Path) -> set[str] | None:
    """Keys (`seed`, `model.num_heads`, `experiment/bag`) swept in the sweep at `sweep_dir`.

    None when the sweep wrote no `multirun.yaml` (e.g. a sweeper that does not write one).
    """
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return None
    hydra_cfg = OmegaConf.load(path).hydra
    lines = list(hydra_cfg.overrides.task)
    params = OmegaConf.select(hydra_cfg, "sweeper.params", default=None) or {}
    lines += [f"{key}={value}" for key, value in params.items()]
    parsed = OverridesParser.create().parse_overrides(lines)
    return {o.key_or_group for o in parsed if o.is_sweep_override()}


def _short(line: str) -> str:
    key, _, value = line.lstrip("+~").partition("=")
    key = key.rsplit("/", 1)[-1]  # experiment/bag=mlp -> bag=mlp
    return f"{key}={value}".replace("/", "_")


def sweep_subdir(num: int, sweep_dir: str, overrides: list[str], fallback: str) -> str:
    """`<job num>_<swept overrides>`, e.g. `3_bag=dot,seed=1`; `fallback` if none are known."""
    keys = swept_keys(sweep_dir)
    parser = OverridesParser.create()
    varied = [o.input_line for o in parser.parse_overrides(list(overrides)) if keys and o.key_or_group in keys]
    name = ",".join(_short(line) for line in varied) if varied else fallback
    name = re.sub(r"[^\w=,.\-\[\]+:@]", "_", name)
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return f"{num}_{name}" if name else str(num)
