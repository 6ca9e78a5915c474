"""Run names: a new run's dir name (start time, random suffix, the settings asked for) and the
sort order of run and metric names."""

import hashlib
import re
import uuid
from datetime import datetime

from attnexp.runs.overrides import override_key

# Settings that say where a run's files go or how it shows progress, not what it computes.
UNLABELLED = ("paths.", "hydra.", "resume", "trainer.enable_progress_bar", "data.num_workers")
MAX_LABEL = 96


def natural_key(name: str) -> list:
    """Sort key for run and metric names: numbers by value, so test/acc_bag2 before _bag10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def new_run_name(overrides: list[str] = ()) -> str:
    """Start time plus a random suffix (two runs started in the same second still differ), then
    what the run was asked for (`run_label`): a dir listing and TensorBoard's run list tell runs
    apart by it."""
    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:6]}"
    label = run_label(overrides)
    return f"{stamp}_{label}" if label else stamp


def short_setting(line: str) -> str:
    """`+experiment/bag=mlp` -> `bag=mlp`: an override as a run's or job's name shows it."""
    key, _, value = line.lstrip("+~").partition("=")
    key = key.rsplit("/", 1)[-1]
    return f"{key}={value}".replace("/", "_")


def run_label(overrides: list[str]) -> str:
    """`model=lstm_attn,scorer=dot`: the command line's settings, without UNLABELLED ones, safe
    as a file name and at most MAX_LABEL characters (a digest of the rest after that)."""
    parts = []
    for line in overrides:
        key = override_key(line)
        if key.startswith(UNLABELLED):
            continue
        parts.append(
            f"no-{key.rsplit('/', 1)[-1]}" if line.startswith("~") else short_setting(line)
        )
    label = re.sub(r"[^\w=,.\-+]", "_", ",".join(parts))
    if len(label) > MAX_LABEL:
        digest = hashlib.sha1(label.encode()).hexdigest()[:8]
        label = f"{label[: MAX_LABEL - 9]}_{digest}"
    return label
