"""Load a finished run back: its composed config, its Hydra choices, its checkpoints.

Shared by evaluate and predict (`attnexp.runner.evaluate`, `attnexp.runner.predict`). A run dir
(see `attnexp.runs.layout`) holds `.hydra/config.yaml` (the composed config, interpolations
unresolved), `.hydra/hydra.yaml` (which group options were chosen) and `checkpoints/*.ckpt`.

    cfg, choices, run_dir, ckpt = load_run(ckpt_path, overrides=["paths.data_dir=/data"])
    datamodule, task = build(cfg, choices, artifacts_dir=str(run_dir))
    load_weights(task, ckpt)
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError, message_lines, require_seed
from attnexp.files import TORCH_LOAD_ERRORS, allow_checkpoint_globals
from attnexp.runner.settings import SEED_KEYS
from attnexp.runs.layout import RUN_CONFIG, run_holding
from attnexp.runs.overrides import override_key
from attnexp.runs.record import LAST_CKPT, METRICS_FILE, read_record

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

HYDRA_FILE = Path(".hydra") / "hydra.yaml"


def given_ckpt_path(cfg: DictConfig) -> str:
    """`ckpt_path=` of an evaluate or predict command, which has no default (an empty one would
    read as the current folder)."""
    missing = OmegaConf.is_missing(cfg, "ckpt_path")
    if missing or cfg.ckpt_path is None or not str(cfg.ckpt_path).strip():
        said = (
            " is missing"
            if missing
            else f"={'null' if cfg.ckpt_path is None else repr(cfg.ckpt_path)} names no path"
        )
        raise ConfigError(f"ckpt_path{said}: give ckpt_path=<a run dir or a .ckpt file>")
    return str(cfg.ckpt_path)


def no_such_path(path: Path) -> ConfigError:
    return ConfigError(f"ckpt_path={path} does not exist (give a .ckpt file or a run dir)")


def check_ckpt_exists(cfg: DictConfig) -> None:
    """ckpt_path names something that is there: said by the command line, before torch loads."""
    path = Path(given_ckpt_path(cfg)).expanduser()
    if not path.exists():
        raise no_such_path(path)


@contextmanager
def run_settings_hint(command: str) -> Iterator[None]:
    """Errors about the run's settings name them as `data.x=...`; on evaluate's and predict's
    command lines such a setting goes inside `overrides=[...]`."""
    try:
        yield
    except ConfigError as err:
        raise ConfigError(
            f"{err} ({command} takes run settings as 'overrides=[\"key=value\"]')"
        ) from err


def read_run_record(run_dir: str | Path) -> dict:
    """The run's metrics.json ({} when it has none)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return {}
    try:
        return read_record(path)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{path} cannot be read ({err}); give ckpt_path=<a .ckpt file in {path.parent / 'checkpoints'}>"
        ) from err


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a run dir (or a folder inside one) -> its best checkpoint (from
    metrics.json), else last.ckpt."""
    path = Path(path).expanduser()
    if path.is_file():
        return path.resolve()
    if not path.is_dir():
        raise no_such_path(path)
    path = run_holding(path) or path  # a folder inside a run (its checkpoints/): the run
    best = read_run_record(path).get("best_ckpt")
    if best:
        if (path / best).is_file():
            return (path / best).resolve()
        raise ConfigError(
            f"ckpt_path={path}: its best checkpoint {best} (recorded in {METRICS_FILE}) is missing "
            f"(give ckpt_path={path / LAST_CKPT} to use the last one instead)"
        )
    if (path / LAST_CKPT).is_file():
        log.warning("%s: no best checkpoint recorded; using %s", path, LAST_CKPT)
        return (path / LAST_CKPT).resolve()
    raise ConfigError(
        f"ckpt_path={path}: no checkpoint in {path / 'checkpoints'} (give a .ckpt file)"
    )


def run_dir_of(ckpt: str | Path) -> Path:
    """<run_dir>/checkpoints/<name>.ckpt -> <run_dir>: the run holding the checkpoint, with its
    config (not a folder some later command wrote a config into)."""
    ckpt = Path(ckpt).resolve()
    run_dir = run_holding(ckpt.parent)
    if run_dir is None or not (run_dir / RUN_CONFIG).is_file():
        raise ConfigError(
            f"ckpt_path={ckpt}: no run config ({RUN_CONFIG}) next to it or above it; the "
            f"checkpoint must stay inside the run dir that `python -m attnexp` wrote"
        )
    return run_dir


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """key=value overrides of existing keys (a typo is an error, not a new key); `+key=value` adds."""
    for line in overrides:
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(
                f"overrides: '{line}' is not key=value (give 'overrides=[\"key=value\", ...]')"
            )
        add = key.startswith("+")
        key = key.lstrip("+")
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        if not isinstance(parent, DictConfig) or (leaf not in parent and not add):
            choices = (
                ", ".join(sorted(str(k) for k in parent)) if isinstance(parent, DictConfig) else ""
            )
            raise ConfigError(
                f"override {line}: the run config has no key '{key}'"
                + (f" (keys under '{parent_key or '<root>'}': {choices})" if choices else "")
                + " (use +key=value to add one)"
            )
        with_flag = OmegaConf.is_struct(cfg)
        OmegaConf.set_struct(cfg, False)
        OmegaConf.update(cfg, key, yaml.safe_load(value) if value else None, merge=False)
        OmegaConf.set_struct(cfg, with_flag)
    return cfg


def read_run_yaml(path: Path, load):
    """A yaml file Hydra wrote into the run dir, loaded with `load`; a damaged one (edited by
    hand, cut short) is said, not a yaml traceback."""
    try:
        data = load(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        problem = " ".join(str(err).split())
    else:
        if data is None or isinstance(data, dict | DictConfig):
            return data
        problem = f"it holds a {type(data).__name__}, not a mapping of settings"
    raise ConfigError(
        f"{path} cannot be read ({problem}): the run's saved config is damaged, so the run cannot "
        f"be rebuilt (restore the file, or give ckpt_path=<another run>)"
    )


def load_run_config(
    run_dir: str | Path, overrides: list[str] = (), output_dir: str | Path | None = None
) -> DictConfig:
    """The run's composed config with `overrides` applied.

    `paths.output_dir` (saved as `${hydra:runtime.output_dir}`) is pointed at `output_dir`, so
    nothing written later lands in the original run dir; by default the run dir itself.
    """
    run_dir = Path(run_dir)
    if not (run_dir / RUN_CONFIG).is_file():
        raise ConfigError(f"{run_dir} is not a run dir: {RUN_CONFIG} is missing")
    cfg = read_run_yaml(run_dir / RUN_CONFIG, OmegaConf.load)
    OmegaConf.update(cfg, "paths.output_dir", str(output_dir or run_dir), force_add=True)
    check_no_group_override(list(overrides), load_choices(run_dir))
    cfg = apply_overrides(cfg, list(overrides))
    for line in overrides:
        if override_key(line) in SEED_KEYS:
            key = override_key(line)
            try:
                require_seed(key, OmegaConf.select(cfg, key))
            except ConfigError as err:
                raise ConfigError(f"override {line}: {err}") from None
    OmegaConf.set_struct(cfg, True)
    return cfg


def longer_than_trained(run_dir: str | Path, cfg: DictConfig) -> str | None:
    """A data.max_seq_len override above the run's own loads (sinusoidal positions and the LSTM
    take any length), but the model never saw those positions: the note that says so."""
    saved = read_run_yaml(Path(run_dir) / RUN_CONFIG, OmegaConf.load)
    trained = OmegaConf.select(saved, "data.max_seq_len")
    given = OmegaConf.select(cfg, "data.max_seq_len")
    if not (isinstance(trained, int) and isinstance(given, int) and given > trained):
        return None
    return (
        f"data.max_seq_len={given} is above the {trained} the run was trained with: tokens past "
        f"position {trained} are positions the model never saw in training, so its outputs on "
        f"longer texts are extrapolation"
    )


def check_no_group_override(overrides: list[str], choices: dict[str, str | None]) -> None:
    """A run is rebuilt from its saved config, in which a group (model, scorer, data, ...) is
    already the option it chose: `scorer=dot` would set the section to the string "dot"."""
    for line in overrides:
        key = override_key(line)
        if key in choices:
            raise ConfigError(
                f"override {line}: {key} is a config group, and the run was trained with "
                f"{key}={choices[key]}; overrides change single keys of the run's config "
                f"({key}.<key>=...), and another {key} needs a run of its own (python -m "
                f"attnexp ... {key}=...)"
            )


def load_choices(run_dir: str | Path) -> dict[str, str | None]:
    """The group options the run was composed from ({"model": "bag_attn", "scorer": "dot", ...})."""
    path = Path(run_dir) / HYDRA_FILE
    if not path.is_file():
        return {}
    hydra_cfg = read_run_yaml(path, lambda p: yaml.safe_load(p.read_text())) or {}
    choices = hydra_cfg.get("hydra", {}).get("runtime", {}).get("choices", {}) or {}
    return {k: v for k, v in choices.items() if not k.startswith("hydra")}


def load_run(
    ckpt_path: str | Path, overrides: list[str] = (), output_dir: str | Path | None = None
) -> tuple[DictConfig, dict[str, str | None], Path, Path]:
    """ckpt file or run dir -> (config, choices, run dir, checkpoint file)."""
    ckpt = find_checkpoint(ckpt_path)
    run_dir = run_dir_of(ckpt)
    cfg = load_run_config(run_dir, overrides, output_dir)
    if cfg.seed is None:
        # seed=null: the run drew one; its saved config still says null, its metrics.json has it.
        # The data it made (the test bags, the dev split) came from that seed, as ours must.
        cfg.seed = read_run_record(run_dir).get("seed")
    return cfg, load_choices(run_dir), run_dir, ckpt


def read_weights(ckpt: str | Path) -> dict:
    """A Lightning checkpoint's state dict, read without running any of its code."""
    import torch  # not at import: evaluate and predict check their command line without torch

    allow_checkpoint_globals()
    try:
        return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    except TORCH_LOAD_ERRORS as err:
        # torch's own message runs to several lines (and advises weights_only=False): not here
        raise ConfigError(
            f"{ckpt} is not a Lightning checkpoint (.ckpt) file ({type(err).__name__}): give "
            f"ckpt_path=<a run dir, or a .ckpt in its checkpoints/>"
        ) from err


def load_weights(task: "torch.nn.Module", ckpt: str | Path, state: dict | None = None) -> None:
    """Load a checkpoint's weights (or its `state`, read already) into a built task; the shapes must
    match the model the run's config (and any overrides) built."""
    try:
        task.load_state_dict(read_weights(ckpt) if state is None else state)
    except RuntimeError as err:
        details = "; ".join(message_lines(err)[1:3])
        raise ConfigError(
            f"{ckpt} does not fit the model built from the run's config ({details}): the "
            f"checkpoint is another model's (a .ckpt copied from another run: give ckpt_path=<the "
            f"run dir it came from>), or an override changed the model's shape (a model.* size, "
            f"data.max_seq_len or the vocabulary; drop it)"
        ) from err
