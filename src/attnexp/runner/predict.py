"""The work of `python -m attnexp.predict` (see `attnexp.predict`, its command line): load a run's
model and DataModule from its saved config and artifacts, classify (or translate) raw inputs,
write predictions.jsonl and the attention figures.
"""

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig

from attnexp.data.base import AttnDataModule
from attnexp.data.text import read_lines
from attnexp.errors import ConfigError, require_bool, require_positive
from attnexp.files import not_a_folder
from attnexp.predictors import predictor_class, predictor_for
from attnexp.runner.build import build_model, check_config, instantiate_checked
from attnexp.runner.config import register_resolvers
from attnexp.runner.load import (
    given_ckpt_path,
    load_run,
    load_weights,
    longer_than_trained,
    read_weights,
    run_settings_hint,
)
from attnexp.runs.collect import EVALUATE, Run, read_records
from attnexp.runs.layout import holds_run, run_holding
from attnexp.runs.naming import new_run_name
from attnexp.runs.record import METRICS_FILE

log = logging.getLogger(__name__)
register_resolvers()

PREDICTIONS_FILE = "predictions.jsonl"
COMPARE_FILE = "compare.html"  # ckpt_path=<a folder of runs>: every run's attention side by side
PREDICT_DEVICES = ("cpu", "cuda")


def check_predict_settings(cfg: DictConfig) -> None:
    """predict.yaml's own settings, before anything is loaded."""
    given_ckpt_path(cfg)
    for key in ("batch_size", "max_figures"):
        require_positive(key, cfg[key])
    for key in ("figures", "attention"):
        require_bool(key, cfg[key])
    if cfg.decode.beam_size is not None:
        require_positive("decode.beam_size", cfg.decode.beam_size)
    require_positive("decode.n_best", cfg.decode.n_best)
    check_device(cfg.device, "predict")


def check_device(name: str, command: str) -> None:
    """`device=` of predict or explain: a CPU or a CUDA device this machine has."""
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(
            f"device={name} is not a torch device ({err}); set device=cpu or device=cuda"
        ) from None
    if device.type not in PREDICT_DEVICES:
        # torch knows mps, xpu, meta, ...: each failed later, with a traceback, or had no weights
        raise ConfigError(
            f"device={name}: {command} runs on {' or '.join(PREDICT_DEVICES)} (set device=cpu, "
            f"device=cuda or device=cuda:<index>)"
        )
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(
            f"device={name}: torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} CUDA device(s) on this machine; set device=cpu"
        )


def check_prediction_dir(out_dir: Path, given: bool) -> None:
    """Predictions go to a folder of their own: never over an earlier prediction's files, never
    into a training run (its dir or a folder below it), where they would mix with the run's.
    `given`: out_dir= was set (else it is the default one under paths.log_dir)."""
    out_dir = out_dir.expanduser().resolve()
    blocker = not_a_folder(out_dir)
    if blocker is not None:
        raise ConfigError(
            f"out_dir={out_dir}: {blocker} is a file, so predictions cannot be written there "
            f"(give a new folder, out_dir=..., or set paths.log_dir=<a folder> for the default one)"
        )
    run_dir = run_holding(out_dir)
    if run_dir is not None:
        advice = (
            "give a folder outside it (out_dir=...), or drop out_dir= for a fresh one under "
            "paths.log_dir/predictions"
            if given
            else "set paths.log_dir=<a folder outside runs>, or give out_dir=<a folder outside it>"
        )
        whose = "" if given else " (the default one, under paths.log_dir)"
        raise ConfigError(
            f"out_dir={out_dir}{whose} is in the run {run_dir}; predict does not write into runs: "
            f"{advice}"
        )
    earlier = [
        str(p.relative_to(out_dir))
        for p in (
            out_dir / PREDICTIONS_FILE,
            out_dir / COMPARE_FILE,
            *out_dir.glob("example[0-9]*"),
        )
        if os.path.lexists(p)  # a dangling link too: written through, it would make its target
    ]
    if earlier:
        raise ConfigError(
            f"out_dir={out_dir} already holds predict outputs ({', '.join(sorted(earlier)[:3])}), "
            f"which this prediction would overwrite: give a new folder (out_dir=...), or drop "
            f"out_dir= for a fresh one under paths.log_dir/predictions"
        )


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


def load_model(
    run_cfg: DictConfig, run_dir: Path, ckpt: Path, weights: dict
) -> tuple[AttnDataModule, torch.nn.Module]:
    """(DataModule with the run's artifacts loaded, model with the checkpoint's weights, on the
    CPU)."""
    datamodule: AttnDataModule = instantiate_checked(run_cfg.data)
    datamodule.load_artifacts(str(run_dir))
    datamodule.setup("predict")
    model = build_model(run_cfg.model, datamodule)
    task = instantiate_checked(
        run_cfg.task,
        model=model,
        num_classes=datamodule.num_classes,
        test_set_names=datamodule.test_set_names,
    )
    load_weights(task, ckpt, weights)
    return datamodule, model.eval()


def texts_file_lines(cfg: DictConfig) -> list[str] | None:
    """The lines of `texts_file` (None where none is given), read once: a comparison gives the
    same lines to every run."""
    if cfg.texts_file is None:
        return None
    path = Path(cfg.texts_file).expanduser()
    if path.is_dir():
        raise ConfigError(
            f"texts_file={path} is a directory (give a file with one example per line)"
        )
    if not path.is_file():
        raise ConfigError(f"texts_file={path} does not exist")
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
    other = [k for k in raw if k not in fields]
    if other:
        raise ConfigError(
            f"{', '.join(f'{k}=' for k in other)} {'does' if len(other) == 1 else 'do'} not "
            f"apply: model={model_name} reads {', '.join(f'{f}=' for f in fields)} (give "
            f"{' '.join(f'{f}=...' for f in fields)} or texts_file=<file>)"
        )
    examples = []
    if raw:
        missing = [f for f in fields if f not in raw]
        if missing:
            raise ConfigError(
                f"missing {', '.join(f'{m}=...' for m in missing)} (this model reads {', '.join(fields)})"
            )
        examples.append({f: raw[f] for f in fields})
    if lines is not None:
        path = Path(cfg.texts_file).expanduser()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                parts = [""] * len(fields)
            else:
                parts = line.split("\t") if len(fields) > 1 else [line]
            if len(parts) != len(fields):
                raise ConfigError(
                    f"{path}:{number}: {len(parts)} tab-separated field(s), expected {len(fields)} ({', '.join(fields)})"
                )
            examples.append(dict(zip(fields, parts, strict=True)))
    if not examples and lines is not None:
        raise ConfigError(
            f"texts_file={cfg.texts_file} holds no lines to predict (give a file with one "
            f"example per line, or {' '.join(f'{f}=...' for f in fields)})"
        )
    if not examples:
        raise ConfigError(
            f"nothing to predict: give {' '.join(f'{f}=...' for f in fields)} or texts_file=<file>"
        )
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


@dataclass
class Predictor:
    """A run loaded for predicting: its DataModule, its model, the examples it will read, and
    how it decodes (translation; {} for a classifier)."""

    run_dir: Path
    ckpt: Path
    datamodule: AttnDataModule
    model: torch.nn.Module
    examples: list[dict[str, str]]
    decode: dict


def predict(cfg: DictConfig, raw: dict[str, str]) -> list[dict]:
    """Every example's result, written to predictions.jsonl with the figures. `ckpt_path=` a folder
    of runs: each completed run's results in turn, each result with its `run` (the run's name
    under the folder), and compare.html showing every run's attention side by side."""
    check_predict_settings(cfg)
    given_dir = cfg.out_dir is not None
    out_dir = (
        Path(cfg.out_dir) if given_dir else Path(cfg.paths.log_dir) / "predictions" / new_run_name()
    ).expanduser()  # once, so the folder checked is the folder written
    check_prediction_dir(out_dir, given_dir)
    lines = texts_file_lines(cfg)
    runs = runs_to_compare(Path(cfg.ckpt_path).expanduser())
    if runs is None:
        predictors = {None: load_predictor(cfg, raw, lines, cfg.ckpt_path)}
    else:  # a refused run leaves no half-written output
        folders = figure_folders([run.name for run in runs])
        if cfg.figures:
            check_figure_folders(out_dir, folders.values())
        predictors = load_compared(cfg, raw, lines, runs)
    out_dir.mkdir(parents=True, exist_ok=given_dir)  # the default one is always new
    results = []
    for name, predictor in predictors.items():
        figures_dir = out_dir if name is None else out_dir / folders[name]
        # compare.html shades the weights whether or not predictions.jsonl keeps them
        with_attention = cfg.attention or (name is not None and cfg.figures)
        run_results = predict_examples(cfg, predictor, figures_dir, with_attention)
        results += [r if name is None else {"run": name, **r} for r in run_results]
        log.info("checkpoint %s (run %s)", predictor.ckpt, predictor.run_dir)
    with open(out_dir / PREDICTIONS_FILE, "w", encoding="utf-8") as f:
        for r in results:
            if not cfg.attention:  # kept for compare.html only
                r = {k: v for k, v in r.items() if k not in ("tokens", "attention")}
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if runs is not None and cfg.figures:
        from attnexp.viz.text import save_comparison  # matplotlib: only where figures are drawn

        captions = {run.name: run_caption(run) for run in runs}
        save_comparison(results, captions, out_dir / COMPARE_FILE, cfg.max_figures)
    log.info("outputs in %s", out_dir)
    return results


def runs_to_compare(path: Path) -> list[Run] | None:
    """Each completed training run under `path`, a folder that is not a run (a multirun dir,
    say); None where `path` is a checkpoint or a run (or lies inside one)."""
    if not path.is_dir() or run_holding(path) is not None:
        return None
    found = [run for run in read_records(path) if run.kind != EVALUATE]
    if not found:
        raise ConfigError(
            f"ckpt_path={path} holds no run (no run's {METRICS_FILE} below it, nor a "
            f"checkpoints/ folder): give a .ckpt file, a run dir, or a folder of runs"
        )
    completed = [run for run in found if run.status == "completed"]
    for run in found:
        if run.status != "completed":
            log.warning("%s: left out of the comparison (status %s)", run.name, run.status)
    if not completed:
        raise ConfigError(
            f"ckpt_path={path}: none of its {len(found)} run(s) completed (give a folder holding "
            f"completed runs, or one run's dir)"
        )
    return completed


def load_compared(
    cfg: DictConfig, raw: dict[str, str], lines: list[str] | None, runs: list[Run]
) -> dict[str, Predictor]:
    """Each run loaded for the same inputs, by name, before anything is written: one refused
    refuses the comparison."""
    # what is wrong with the command itself is said as such, not as the first run's refusal
    if not raw and not lines:
        empty = "" if lines is None else f" (texts_file={cfg.texts_file} holds no lines)"
        raise ConfigError(
            f"nothing to predict{empty}: give the runs' inputs (text=..., or text_a=... "
            f"text_b=... for pair models) or texts_file=<file>; ckpt_path={cfg.ckpt_path} reads "
            f"the same inputs with every run"
        )
    predictors = {}
    for run in runs:
        try:
            predictors[run.name] = load_predictor(cfg, raw, lines, run.path)
        except ConfigError as err:
            raise ConfigError(
                f"{run.name}: {err}; ckpt_path={cfg.ckpt_path} compares every completed run "
                f"under it and one refused stops them all (where only this run is refused, "
                f"give a folder without it)"
            ) from err
    return predictors


def run_caption(run: Run) -> str:
    """What compare.html says of a run beside its name: its test BLEU (a translation run: its
    test/acc is a token accuracy), else its test accuracy, as its record has it."""
    for key in ("test/bleu", "test/acc"):
        if key in run.metrics:
            return f"{key} {run.metrics[key]:.4f}"
    return ""


def figure_folders(run_names: list[str]) -> dict[str, str]:
    """Each run's folder for its figures, one level below out_dir (check_figure_folders: a new
    one): its name, a run 3 levels down as `a__b__c`; a name that comes out as an earlier run's
    (`a/b` and `a__b`) gets `~2` after it, so no run's figures replace another's."""
    folders: dict[str, str] = {}
    for name in run_names:
        folder = base = name.replace("/", "__")
        n = 1
        while folder in folders.values():
            n += 1
            folder = f"{base}~{n}"
        folders[name] = folder
    return folders


def check_figure_folders(out_dir: Path, folders: Iterable[str]) -> None:
    """A comparison's figure folders, named after its runs, must be new: out_dir the folder of
    runs itself put figures into the runs, and an interrupted comparison's figures would be
    drawn over."""
    out_dir = out_dir.expanduser().resolve()
    there = [folder for folder in folders if os.path.lexists(out_dir / folder)]  # links too
    if there:
        runs = " (runs)" if all(holds_run(out_dir / folder) for folder in there) else ""
        raise ConfigError(
            f"out_dir={out_dir} already holds {', '.join(there[:3])}{runs}: each run's figures go "
            f"to <out_dir>/<run name>/, a new folder; give a folder that holds none of the runs' "
            f"names (out_dir=...), or drop out_dir= for a fresh one under paths.log_dir/predictions"
        )


def load_predictor(
    cfg: DictConfig, raw: dict[str, str], lines: list[str] | None, ckpt_path: str | Path
) -> Predictor:
    """A run loaded for `raw` and the `texts_file_lines`, each read as the run's model reads."""
    run_cfg, choices, run_dir, ckpt = load_run(ckpt_path, list(cfg.overrides))
    longer = longer_than_trained(run_dir, run_cfg)
    if longer is not None:
        log.warning(longer)
    check_config(run_cfg, choices)
    model_name = choices.get("model")
    examples = read_examples(cfg, raw, lines, raw_fields_of(run_cfg, model_name), model_name)
    decode = decode_settings(cfg, run_cfg, model_name)
    weights = read_weights(ckpt)  # not a checkpoint: said before, not as a run setting
    with run_settings_hint("predict"):
        datamodule, model = load_model(run_cfg, run_dir, ckpt, weights)
    return Predictor(run_dir, ckpt, datamodule, model, examples, decode)


def predict_examples(
    cfg: DictConfig, predictor: Predictor, out_dir: Path, with_attention: bool
) -> list[dict]:
    """Each example's answer (label and probabilities, or translation and score: the predictor's
    `predict_batch`), notes, figure files and (`with_attention`, for a model with attention)
    tokens and attention weights; the figures go to `out_dir`. The model is on `cfg.device` while
    it predicts: a comparison holds one run's model there at a time."""
    examples, reader = predictor.examples, predictor_for(predictor.datamodule)
    model = predictor.model.to(cfg.device)
    results = [{"input": ex, "problem": reader.check_raw(ex)} for ex in examples]
    valid = [i for i, r in enumerate(results) if r["problem"] is None]
    for start in range(0, len(valid), cfg.batch_size):
        chunk = valid[start : start + cfg.batch_size]
        batch = {
            k: v.to(cfg.device) for k, v in reader.encode_raw([examples[i] for i in chunk]).items()
        }
        with torch.no_grad():
            answer = reader.predict_batch(model, batch, **predictor.decode)
        attention = answer.attention
        stems = [
            out_dir / f"example{i:04d}" if cfg.figures and i < cfg.max_figures else None
            for i in chunk
        ]
        drawn = any(stems)
        if drawn and attention is not None:  # a model without attention draws nothing
            out_dir.mkdir(parents=True, exist_ok=True)
        # each token's weight per view, worked out once for the figures and the results
        views = reader.prediction_attention(batch, attention) if with_attention or drawn else []
        files = (
            reader.prediction_figures(batch, answer.scores, attention, views, stems)
            if drawn
            else []
        )
        for row, i in enumerate(chunk):
            results[i].update(
                **answer.fields[row],
                notes=reader.raw_notes(examples[i]),
                files=[
                    str(f) for f in files if stems[row] is not None and f.stem == stems[row].name
                ],
                **(attention_fields(*views[row]) if views and with_attention else {}),
            )
    predictor.model.cpu()
    return results


def attention_fields(tokens: list[str], per_view: dict[str, torch.Tensor]) -> dict:
    """An example's tokens and the attention each receives per view, for predictions.jsonl: what
    its HTML page shades, as numbers (every example, also those past max_figures)."""
    return {
        "tokens": tokens,
        "attention": {view: [round(float(w), 6) for w in ws] for view, ws in per_view.items()},
    }
