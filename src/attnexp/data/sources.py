"""Pick where a dataset comes from: local files, the HF hub, or the package's embedded sample.

`source=auto` tries them in that order; whatever it settles on other than local files is logged at
WARNING and recorded as `data_source` in the run's metrics.json.
"""

import logging
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TypeVar

from attnexp.errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")
SOURCES = ("auto", "local", "hub", "sample")


# What huggingface_hub and datasets read as true (case-insensitive); anything else is false.
HF_TRUE_VALUES = ("1", "ON", "YES", "TRUE")


def hub_offline() -> bool:
    return any(
        os.environ.get(v, "").upper() in HF_TRUE_VALUES
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def sample_path(name: str) -> Path:
    """Path of an embedded sample file shipped in `attnexp.data.samples`."""
    return Path(str(resources.files("attnexp.data.samples").joinpath(name)))


def planned(source: str, local_dir: Path, has_hub: bool, has_sample: bool) -> str | None:
    """The source `resolve` reads first, decided before loading anything: "local", "hub" (under
    `source=auto` a failing hub falls back to the sample) or "sample"; None when none applies."""
    if source not in SOURCES:
        raise ConfigError(
            f"data.source '{source}' is not one of {', '.join(SOURCES)} (set data.source=...)"
        )
    if source == "local" or (source == "auto" and local_dir.is_dir()):
        return "local"
    if has_hub and (source == "hub" or (source == "auto" and not hub_offline())):
        return "hub"
    if has_sample and source in ("auto", "sample"):
        return "sample"
    return None


def resolve(
    dataset: str,
    source: str,
    local_dir: Path,
    load_local: Callable[[Path], T],
    load_hub: Callable[[], T] | None,
    load_sample: Callable[[], T] | None,
) -> tuple[T, str]:
    """Load `dataset` from the requested source; returns (data, source used)."""
    plan = planned(source, local_dir, load_hub is not None, load_sample is not None)
    if plan == "local":
        if not local_dir.is_dir():
            raise ConfigError(
                f"{dataset}: data folder {local_dir} does not exist (put the files there, or set "
                f"paths.data_dir=<folder holding {local_dir.name}/>, or data.source=auto)"
            )
        return load_local(local_dir), "local"
    if plan == "hub":
        if source == "auto":
            log.warning(
                "%s: no local files in %s: loading it from the HF hub (set paths.data_dir=<folder "
                "holding %s/> to use local files)",
                dataset,
                local_dir,
                local_dir.name,
            )
        try:
            return load_hub(), "hub"
        except Exception as err:  # network, auth or format: say which, then fall back
            if source == "hub":
                raise ConfigError(f"{dataset}: could not load from the HF hub: {err}") from err
            log.warning("%s: the HF hub failed (%s)", dataset, err)
    if source in ("auto", "sample") and load_sample is not None:
        log.warning(
            "%s: using the small embedded SAMPLE, not the full dataset (no files in %s; set "
            "paths.data_dir=<folder holding %s/> for real runs)",
            dataset,
            local_dir,
            local_dir.name,
        )
        return load_sample(), "sample"
    raise ConfigError(
        f"{dataset}: no data found: {local_dir} does not exist and the HF hub is unreachable "
        f"(put the files in {local_dir}, or set paths.data_dir=...)"
    )
