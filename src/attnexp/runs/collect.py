"""The runs under a folder, read from their records: what each was run with and what it measured.

A variant is what a run was run with: its overrides, its config group choices and the values of
its composed config (`.hydra/config.yaml`), so `scorer=additive` where additive is the default
is the same variant as no scorer= at all; runs on other data (`data_source`, and the data dir of
local data) are another variant. A (variant, seed) run repeated counts once: the one started
last. Evaluation records (`python -m attnexp.evaluate`) are kept apart from the training runs.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from attnexp.runs.flatten import flat_config
from attnexp.runs.lock import lock_held
from attnexp.runs.machine import NOT_RECORDED, machine_label
from attnexp.runs.naming import natural_key
from attnexp.runs.record import METRICS_FILE, read_record

log = logging.getLogger(__name__)

NOT_VARIANT = ("seed", "resume", "paths.", "hydra.", "trainer.enable_progress_bar")
DATA_KEY = "data_source"  # the data a run saw: sample | hub | local:<data dir>
DATA_HASH_KEY = "data_hash"  # a content hash of the data files it read (train records it)
UNREADABLE = "unreadable"  # the status of a metrics.json that is not a run record
EVALUATE = "evaluate"  # metrics.json "kind" of an evaluation record
KILLED = "killed"  # a record left `running` whose run dir's lock nobody holds
_ABSENT = object()
SKIP_DIRS = {"checkpoints", "tb", ".hydra", ".submitit", "__pycache__"}  # never hold run records


@dataclass
class Run:
    """One run dir and what its metrics.json says."""

    path: Path
    name: str
    status: str
    seed: int | None
    settings: dict[str, str]  # key -> value the run was run with (overrides, choices, config)
    metrics: dict[str, float]
    history: list[dict] = field(default_factory=list)
    error: str = ""
    duration_s: float | None = None
    kind: str = "train"
    started_at: str = ""
    config: DictConfig | None = field(default=None, repr=False)  # its composed config
    evaluated: str = ""  # an evaluation record: the run dir it tested
    variant: dict[str, str] = field(default_factory=dict)
    repeat_of: str = ""  # a repeated (variant, seed): the run counted instead of this one
    machine: str = NOT_RECORDED  # what computed it: `machine_label` of its record
    commit: str = ""  # the source commit it ran at, where recorded
    stopped_early: int | None = None  # the epoch at which callbacks=early_stopping ended it

    @property
    def variant_label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.variant.items()) or "all runs"

    @property
    def note(self) -> str:
        if self.repeat_of:
            return f"seed {self.seed} repeated: not counted ({self.repeat_of} is)"
        if self.stopped_early is not None and not self.error:
            return f"stopped early at epoch {self.stopped_early}"
        return " ".join(self.error.split())[:200]


def _setting_name(key: str) -> str:
    return key.lstrip("+~").rsplit("/", 1)[-1]  # +experiment/bag -> bag


def parse_overrides(lines: list[str]) -> dict[str, str]:
    pairs = (line.partition("=") for line in lines)
    return {_setting_name(key): value for key, _, value in pairs}


def _text(value) -> str:
    """A config value as typed on a command line: null, true, 0.001."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)


def config_value(config: DictConfig | None, key: str) -> str | None:
    """`key`'s value in a composed config; None without one, or where `key` is not a value."""
    if config is None:
        return None
    value = OmegaConf.select(config, key, default=_ABSENT, throw_on_resolution_failure=False)
    return None if value is _ABSENT or isinstance(value, DictConfig) else _text(value)


def _hydra_file(run_dir: Path, name: str) -> DictConfig | None:
    """A run's `.hydra/<name>`: config.yaml is its composed config, hydra.yaml Hydra's own. A
    resumed run's latest attempt has its own (`.hydra/resume_<time>/`): the metrics are that
    attempt's, which may have trained longer (trainer.max_epochs=)."""
    attempts = sorted((run_dir / ".hydra").glob(f"resume_*/{name}"))
    path = attempts[-1] if attempts else run_dir / ".hydra" / name
    if not path.is_file():
        return None
    try:
        return OmegaConf.load(path)
    except (OSError, yaml.YAMLError) as err:
        log.warning("cannot read %s: %s", path, err)
        return None


def _data_label(record: dict, settings: dict[str, str], config: DictConfig | None) -> str:
    """The embedded sample and the hub are the same data everywhere; local data is its dir: the
    absolute one recorded, or (records without it) the one configured, maybe a relative path."""
    source = record["data_source"]
    if source != "local":
        return source
    data_dir = (
        record.get("data_dir")
        or config_value(config, "paths.data_dir")
        or settings.get("paths.data_dir")
    )
    return f"local:{data_dir}" if data_dir else source


# The fields a report reads, and the JSON types a run record gives them (null: not recorded).
RECORD_FIELDS = {
    "status": str,
    "seed": int,
    "metrics": dict,
    "history": list,
    "overrides": list,
    "choices": dict,
    "machine": dict,
    "duration_s": int | float,
    "stopped_early": dict,
}


def record_problem(record: dict) -> str | None:
    """What keeps a record's fields from being read as a run's; None if nothing."""
    for key, kind in RECORD_FIELDS.items():
        value = record.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f'its "{key}" is {json.dumps(value)[:40]}, not a run record\'s'
    rows = record.get("history") or []
    if not all(isinstance(row, dict) and isinstance(row.get("epoch"), int) for row in rows):
        return 'its "history" holds a row without a whole-number "epoch"'
    stopped = record.get("stopped_early")
    if stopped is not None and not _whole_number(stopped.get("epoch")):
        return 'its "stopped_early" has no whole-number "epoch"'
    return None


def _whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_run(path: Path, root: Path) -> Run:
    """`path` is a metrics.json; a file that cannot be read gives a row with status `unreadable`."""
    name = str(path.parent.relative_to(root)) if path.parent != root else path.parent.name
    try:
        record = read_record(path)
    except (OSError, ValueError) as err:
        log.warning("cannot read %s: %s", path, err)
        return Run(path.parent, name, UNREADABLE, None, {}, {}, error=str(err))
    error = record_problem(record)
    if error is not None:  # valid JSON, but not a run record (edited by hand, another tool's)
        log.warning("cannot read %s: %s", path, error)
        return Run(path.parent, name, UNREADABLE, None, {}, {}, error=error)
    status = record.get("status", "unknown")
    if status == "running" and lock_held(path.parent) is False:  # it never got to write `failed`
        status = KILLED
    metrics = dict(record.get("metrics") or {})
    history = list(record.get("history") or [])
    if not metrics and history:  # running or failed: the last epoch it finished
        metrics = {k: v for k, v in history[-1].items() if k not in ("epoch", "step")}
    config = _hydra_file(path.parent, "config.yaml")
    settings = parse_overrides(record.get("overrides") or [])
    # The group choices Hydra composed: an explicit default is the same choice as the implicit one.
    # A run that failed before recording them: Hydra wrote them before the job started.
    choices = record.get("choices")
    if choices is None:
        hydra_cfg = _hydra_file(path.parent, "hydra.yaml")
        choices = OmegaConf.select(hydra_cfg, "hydra.runtime.choices") if hydra_cfg else None
    for key, value in (choices or {}).items():
        if not key.startswith("hydra"):
            settings[_setting_name(key)] = _text(value)
    if record.get("data_source") is not None:
        settings[DATA_KEY] = _data_label(record, settings, config)
    if isinstance(record.get(DATA_HASH_KEY), str):
        settings[DATA_HASH_KEY] = record[DATA_HASH_KEY][:8]
    return Run(
        path=path.parent,
        name=name,
        status=status,
        seed=record.get("seed"),
        settings=settings,
        metrics={k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        history=history,
        error=str(record.get("error") or ""),
        duration_s=record.get("duration_s"),
        kind=record.get("kind") or "train",
        started_at=str(record.get("started_at") or ""),
        config=config,
        evaluated=str(record.get("run_dir") or ""),
        machine=machine_label(record.get("machine"), record.get("torch_threads")),
        commit=str((record.get("machine") or {}).get("commit") or ""),
        stopped_early=(record.get("stopped_early") or {}).get("epoch"),
    )


def find_runs(root: Path) -> list[Run]:
    """Every training run under `root` (a run dir is a folder holding metrics.json)."""
    return find_records(root)[0]


def read_records(root: Path) -> list[Run]:
    """Every record under `root` (runs and evaluations), as it is, in a stable order."""
    paths = sorted(_record_files(root), key=lambda p: natural_key(str(p.relative_to(root))))
    return [read_run(p, root) for p in paths]


def find_records(root: Path) -> tuple[list[Run], list[Run]]:
    """The training runs under `root`, with their variants, and the evaluation records; each in
    a stable order."""
    records = read_records(root)
    runs = [run for run in records if run.kind != EVALUATE]
    keys = {k for run in runs for k in run.settings}
    for run in runs:  # a key set in some runs only: the others' value is in their config
        for key in keys:
            value = config_value(run.config, key)
            if value is not None:
                run.settings[key] = value
    _assign_variants(runs)
    # Settings that differ only inside the composed configs (a yaml default changed between
    # commits, say) split variants too: never average or count as repeats runs of other configs.
    hidden = config_differences(runs)
    if hidden:
        log.warning("runs differ in settings no override names: %s", ", ".join(hidden))
        for run in runs:
            leaves = config_leaves(run.config)
            run.settings.update({k: leaves[k] for k in hidden if k in leaves})
        _assign_variants(runs)
    mark_repeats(runs)
    return runs, [run for run in records if run.kind == EVALUATE]


def _assign_variants(runs: list[Run]) -> None:
    # an unreadable record has no settings: it must not make every key look varied
    varied = varied_keys([run for run in runs if run.status != UNREADABLE])
    for run in runs:
        run.variant = {k: run.settings.get(k, "-") for k in varied}


def config_leaves(config: DictConfig | None) -> dict[str, str]:
    """A composed config as {dotted key: value as typed}, without the keys that never tell
    variants apart (seed, paths, ...); {} without a config."""
    if config is None:
        return {}
    return {
        key: _text(value)
        for key, value in flat_config(OmegaConf.to_container(config, resolve=False)).items()
        if value != {} and not f"{key}.".startswith(NOT_VARIANT)  # an empty group holds no leaf
    }


def config_differences(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs of one variant."""
    by_variant: dict[str, list[dict[str, str]]] = {}
    for run in runs:
        if run.config is not None:
            by_variant.setdefault(run.variant_label, []).append(config_leaves(run.config))
    differ = set()
    for leaves in by_variant.values():
        for key in set().union(*leaves):
            if len({one.get(key) for one in leaves}) > 1:
                differ.add(key)
    return sorted(differ)


def same_config_variants(runs: list[Run]) -> list[list[str]]:
    """Groups of variants that ran one and the same config on the same data (a command-line
    setting overrode what was to set them apart): their rows are one experiment, not several."""
    signatures: dict[str, set] = {}
    for run in runs:
        if run.config is None or run.status == UNREADABLE:
            continue
        leaves = tuple(sorted(config_leaves(run.config).items()))
        data = (run.settings.get(DATA_KEY), run.settings.get(DATA_HASH_KEY))
        signatures.setdefault(run.variant_label, set()).add((leaves, data))
    by_signature: dict[tuple, list[str]] = {}
    for label, found in signatures.items():
        if len(found) == 1:
            by_signature.setdefault(next(iter(found)), []).append(label)
    return [labels for labels in by_signature.values() if len(labels) > 1]


def mark_repeats(runs: list[Run]) -> None:
    """Runs of one variant with the same seed are not independent: one counts, the completed one
    started last (on a tie, the last listed), or where none completed, the one started last (a
    failed or killed seed run again counts once); the others get `repeat_of`."""
    same: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        if run.seed is not None:
            same.setdefault((run.variant_label, run.seed), []).append(run)
    for group in same.values():
        completed = [r for r in group if r.status == "completed"]
        counted = sorted(completed or group, key=lambda r: r.started_at)[-1]
        for run in group:
            if run is not counted:
                run.repeat_of = counted.name
                log.warning(
                    "%s repeats seed %s of %s: not counted", run.name, run.seed, counted.name
                )


def _record_files(root: Path) -> list[Path]:
    """Every metrics.json under root, following symlinked run dirs (a hand-picked folder of links
    to runs is a comparison too), each real folder once."""
    found, seen = [], set()
    for folder, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        # walked in name order: a run reached by two links is read by the same one each time
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
        if METRICS_FILE in files:
            found.append(Path(folder) / METRICS_FILE)
    return found


def varied_keys(runs: list[Run]) -> list[str]:
    """Settings whose value differs between runs (seeds aside): what tells variants apart."""
    keys = sorted({k for run in runs for k in run.settings if not k.startswith(NOT_VARIANT)})
    # A run that failed before loading its data has no data_source nor data hash: unknown, not
    # other data.
    unknown_if_absent = (DATA_KEY, DATA_HASH_KEY)
    return [
        k
        for k in keys
        if len({r.settings.get(k) for r in runs if k not in unknown_if_absent or k in r.settings})
        > 1
    ]
