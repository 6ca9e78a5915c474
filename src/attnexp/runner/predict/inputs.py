"""The raw inputs of a prediction (arguments and texts_file lines, read as the run's model reads
them) and how a translation run decodes them."""

from pathlib import Path

from hydra.utils import get_class
from omegaconf import DictConfig

from attnexp.data.text import read_lines
from attnexp.errors import ConfigError
from attnexp.predictors import predictor_class


def raw_fields_of(run_cfg: DictConfig, model_name: str | None) -> tuple[str, ...]:
    """The raw inputs the run's data reads, known from its DataModule class's input kind: a run
    that takes none (the bag models) is refused before any data is loaded."""
    fields = predictor_class(get_class(run_cfg.data._target_).input_kind).raw_fields
    if not fields:
        raise ConfigError(
            f"model={model_name} reads no raw text (its data, {run_cfg.data._target_}, has no "
            f"raw_fields): predict works on text models (IMDB, LCQMC, translation); test this "
            f"run with python -m attnexp.evaluate ckpt_path=..."
        )
    return fields


def texts_file_lines(cfg: DictConfig) -> list[str] | None:
    """The lines of `texts_file` (None where none is given), read once: a comparison gives the
    same lines to every run."""
    if cfg.texts_file is None:
        return None
    path = Path(cfg.texts_file).expanduser()
    if not path.is_file():
        what = "is a directory (give a file with one example per line)"
        raise ConfigError(f"texts_file={path} {what if path.is_dir() else 'does not exist'}")
    return read_lines(path, "texts_file")


def read_examples(
    cfg: DictConfig,
    raw: dict[str, str],
    lines: list[str] | None,
    fields: tuple[str, ...],
    model_name: str | None,
) -> list[dict[str, str]]:
    """The example given as arguments, then one per line of `texts_file` (its `lines`); a blank
    line is an example with empty fields (a "no prediction" row, the file goes on)."""
    give = " ".join(f"{f}=..." for f in fields)
    other = [k for k in raw if k not in fields]
    missing = [f for f in fields if f not in raw] if raw else []
    if other or missing:
        raise ConfigError(
            f"{', '.join(f'{k}=' for k in other)} {'does' if len(other) == 1 else 'do'} not "
            f"apply: model={model_name} reads {', '.join(f'{f}=' for f in fields)} (give "
            f"{give} or texts_file=<file>)"
            if other
            else f"missing {', '.join(f'{m}=...' for m in missing)} (this model reads "
            f"{', '.join(fields)})"
        )
    examples = [{f: raw[f] for f in fields}] if raw else []
    if lines is not None:
        examples += file_examples(Path(cfg.texts_file).expanduser(), lines, fields)
    if not examples:
        raise ConfigError(
            f"texts_file={cfg.texts_file} holds no lines to predict (give a file with one "
            f"example per line, or {give})"
            if lines is not None
            else f"nothing to predict: give {give} or texts_file=<file>"
        )
    return examples


def file_examples(path: Path, lines: list[str], fields: tuple[str, ...]) -> list[dict[str, str]]:
    """One example per line of the file at `path`, its fields tab-separated."""
    examples = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            parts = [""] * len(fields)
        else:
            parts = line.split("\t") if len(fields) > 1 else [line]
        if len(parts) != len(fields):
            raise ConfigError(
                f"{path}:{number}: {len(parts)} tab-separated field(s), expected {len(fields)} "
                f"({', '.join(fields)})"
            )
        examples.append(dict(zip(fields, parts, strict=True)))
    return examples


def decode_settings(cfg: DictConfig, run_cfg: DictConfig, model_name: str | None) -> dict:
    """How a translation run decodes: its decode.* as trained, with predict's decode.beam_size
    (where given) and decode.n_best; {} for a run that does not decode (a classifier)."""
    asked = {"n_best": cfg.decode.n_best}
    if cfg.decode.beam_size is not None:
        asked["beam_size"] = cfg.decode.beam_size
    if "decode" not in run_cfg:
        if cfg.decode.beam_size is not None or cfg.decode.n_best != 1:
            raise ConfigError(
                f"decode.beam_size={cfg.decode.beam_size}, decode.n_best={cfg.decode.n_best}: "
                f"decoding settings apply to translation runs, and model={model_name} classifies "
                f"(drop decode.*)"
            )
        return {}
    trained = {k: run_cfg.decode[k] for k in ("beam_size", "alpha", "max_len")}
    return {**trained, **asked}
