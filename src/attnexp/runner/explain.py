"""The work of `python -m attnexp.explain` (see `attnexp.explain`, its command line): load a
finished run, measure how faithful its attention is on a fixed sample of its own test split
(`attnexp.faithfulness`), and write explain.json, explain.md with its plots and a page of
examples. A folder of runs: each completed run in its own folder, then one table comparing them.
"""

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from attnexp.data.base import AttnDataModule
from attnexp.errors import ConfigError
from attnexp.faithfulness import (
    Settings,
    Subject,
    concatenate,
    explain_batch,
    summarise_columns,
)
from attnexp.faithfulness.subject import INPUT_KINDS
from attnexp.faithfulness.translation import Translation, pairs_of
from attnexp.faithfulness.translation_measures import explain_translation_batch
from attnexp.files import write_atomically
from attnexp.predictors import predictor_for
from attnexp.runner.build import build
from attnexp.runner.config import register_resolvers
from attnexp.runner.evaluate import check_same_data, run_overrides
from attnexp.runner.explain_page import no_attention, write_comparison, write_run_page
from attnexp.runner.load import (
    given_ckpt_path,
    load_run,
    load_weights,
    read_run_record,
    run_settings_hint,
)
from attnexp.runner.predict import figure_folders, runs_to_compare
from attnexp.runner.predict.settings import check_command_settings
from attnexp.runner.threads import set_threads
from attnexp.runs.layout import run_holding
from attnexp.runs.naming import new_run_name
from attnexp.schema import EXPLAIN

log = logging.getLogger(__name__)
register_resolvers()

EXPLAIN_FILE = "explain.json"
TRANSLATION = "translation"


class NoAttentionError(ConfigError):
    """The run's model returns no attention weights: there is nothing to explain."""


def check_explain_settings(cfg: DictConfig) -> None:
    check_command_settings(cfg, EXPLAIN, "explain")


def check_explain_dir(out_dir: Path, given: bool) -> None:
    """An explanation goes to a new folder (or an empty one), outside every run dir."""
    run_dir = run_holding(out_dir)
    if run_dir is not None:
        raise ConfigError(
            f"out_dir={out_dir} is in the run {run_dir}; explain does not write into runs (give "
            f"out_dir=<a folder outside it>, or drop out_dir= for a fresh one under "
            f"paths.log_dir/explains)"
        )
    if given and out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(
            f"out_dir={out_dir} is not an empty folder, and explain never writes over earlier "
            f"outputs (give a new folder, or drop out_dir= for a fresh one under "
            f"paths.log_dir/explains)"
        )


def explain(cfg: DictConfig, cli_overrides: list[str]) -> dict:
    """Explain the run (or each completed run of a folder of runs) named by `ckpt_path`; returns
    {"out_dir": ..., "runs": {name: explain.json's content}, "left_out": {name: why}}."""
    check_explain_settings(cfg)
    given_dir = cfg.out_dir is not None
    out_dir = (
        Path(cfg.out_dir) if given_dir else Path(cfg.paths.log_dir) / "explains" / new_run_name()
    ).expanduser()
    check_explain_dir(out_dir, given_dir)
    overrides = run_overrides(cfg, cli_overrides)
    # as trainer.threads=auto: the cores the load leaves free (OMP_NUM_THREADS wins)
    set_threads("auto", on_cpu=torch.device(cfg.device).type == "cpu")
    runs = runs_to_compare(Path(given_ckpt_path(cfg)).expanduser())
    if runs is None:
        result = explain_run(cfg, cfg.ckpt_path, overrides, out_dir)
        return {"out_dir": out_dir, "runs": {result["run_dir"]: result}, "left_out": {}}
    folders = figure_folders([run.name for run in runs])
    results, left_out = {}, {}
    for run in runs:
        try:
            results[run.name] = explain_run(cfg, run.path, overrides, out_dir / folders[run.name])
        except NoAttentionError as err:  # a baseline without attention beside the scorers
            log.warning("%s: left out (%s)", run.name, err)
            left_out[run.name] = str(err)
    if not results:
        raise ConfigError(
            f"ckpt_path={cfg.ckpt_path}: none of its runs has attention to explain "
            f"({'; '.join(f'{k}: {v}' for k, v in left_out.items())})"
        )
    root = Path(given_ckpt_path(cfg)).expanduser()
    write_comparison(root, runs, results, left_out, folders, out_dir)
    compared = {
        "ckpt_path": str(root),
        "runs": {
            name: {
                "folder": folders[name],
                "sets": {k: v["summary"] for k, v in result["sets"].items()},
            }
            for name, result in results.items()
        },
        "left_out": left_out,
    }
    write_atomically(
        out_dir / EXPLAIN_FILE,
        lambda p: p.write_text(json.dumps(compared, indent=1, allow_nan=False), encoding="utf-8"),
    )
    return {"out_dir": out_dir, "runs": results, "left_out": left_out}


@dataclass
class LoadedRun:
    run_dir: Path
    ckpt: Path
    config: DictConfig
    choices: dict
    datamodule: AttnDataModule
    subject: Subject | Translation


def load_explained(cfg: DictConfig, ckpt_path, overrides: list[str], out_dir: Path) -> LoadedRun:
    """The run rebuilt from its config and artifacts, its checkpoint's weights loaded, its model
    on `device` in eval mode."""
    run_cfg, choices, run_dir, ckpt = load_run(ckpt_path, overrides, out_dir)
    if run_cfg.seed is None:
        raise ConfigError(
            f"{run_dir} ran with seed=null and records no drawn seed: its test data cannot be "
            f"made again (give 'overrides=[\"seed=<the seed it drew>\"]')"
        )
    with run_settings_hint("explain"):
        datamodule, task = build(run_cfg, choices, artifacts_dir=str(run_dir))
    if datamodule.input_kind not in (*INPUT_KINDS, TRANSLATION):
        raise NoAttentionError(
            f"model={choices.get('model')} reads {datamodule.input_kind} batches; explain "
            f"measures the attention of models of {', '.join(INPUT_KINDS)} or {TRANSLATION}"
        )
    # the kind of data the run tested on (local files, hub, embedded sample), as evaluate checks
    check_same_data(datamodule.source, read_run_record(run_dir), run_cfg, overrides)
    load_weights(task, ckpt)
    datamodule.setup("test")
    model = task.model.to(torch.device(cfg.device))
    subject = (
        Translation(model)
        if datamodule.input_kind == TRANSLATION
        else Subject(model, datamodule.input_kind)
    )
    return LoadedRun(run_dir, ckpt, run_cfg, choices, datamodule, subject)


def explain_run(cfg: DictConfig, ckpt_path, overrides: list[str], out_dir: Path) -> dict:
    """One run explained into `out_dir`: explain.json's content."""
    run = load_explained(cfg, ckpt_path, overrides, out_dir)
    settings = Settings(
        ig_steps=cfg.explain.ig_steps,
        top_k=cfg.explain.top_k,
        permutations=cfg.explain.permutations,
        erasure_steps=cfg.explain.erasure_steps,
    )
    generator = torch.Generator(device=cfg.device).manual_seed(cfg.explain.seed)
    sets, shown = {}, {}
    for name, loader in test_sets(run.datamodule).items():
        sets[name], shown[name] = explain_set(run, loader, name, cfg, settings, generator)
    result = {
        "run_dir": str(run.run_dir),
        "ckpt": str(run.ckpt),
        "choices": run.choices,
        "data_source": run.datamodule.source,
        "torch_threads": torch.get_num_threads(),
        "explain": OmegaConf.to_container(cfg, resolve=False),
        "run_config": OmegaConf.to_container(run.config, resolve=False),
        "sets": sets,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(
        out_dir / EXPLAIN_FILE,
        lambda p: p.write_text(json.dumps(result, indent=1, allow_nan=False), encoding="utf-8"),
    )
    if cfg.explain.figures:
        write_run_page(result, shown, predictor_for(run.datamodule), cfg, out_dir)
    return result


def explain_set(
    run: LoadedRun,
    loader,
    name: str,
    cfg: DictConfig,
    settings: Settings,
    generator: torch.Generator,
) -> tuple[dict, list[dict]]:
    """One test set's sample measured: ({"summary", "examples"} for explain.json, the first
    batches with their importances, for the figures)."""
    batches = sampled_batches(
        run, loader, cfg.explain.n_examples, cfg.explain.batch_size, cfg.explain.seed, name
    )
    device = torch.device(cfg.device)
    columns, views, sentences = [], [], 0
    for number, batch in enumerate(batches):
        batch = {k: v.to(device) for k, v in batch.items()}
        labels, item_labels = batch.pop("labels", None), batch.pop("item_labels", None)
        if number == 0:
            check_attends(run, batch)
        if isinstance(run.subject, Translation):
            pairs = pairs_of(batch, cfg.explain.max_target_tokens)
            found, scores = explain_translation_batch(run.subject, pairs, settings, generator)
            batch, labels = {**batch, "pairs": pairs}, found["label"]
            found["sentence"] = found["sentence"] + sentences
            sentences += len(batch["src_ids"])
        else:
            found, scores = explain_batch(
                run.subject, batch, labels, settings, generator, item_labels
            )
        batch["labels"] = labels
        columns.append(found)
        if sum(len(v["labels"]) for v in views) < cfg.explain.max_examples_shown:
            views.append({**batch, "found": found, "scores": scores})
    merged = concatenate(columns)
    log.info("%s: %d %s explained", name, len(merged["correct"]), unit_of(run))
    summary = summarise_columns(merged)
    if isinstance(run.subject, Translation):
        summary["sentences"] = sentences
        summary["unit"] = TRANSLATION_UNIT
    found = {
        "summary": summary,
        "examples": {k: without_nan(v.tolist()) for k, v in merged.items()},
    }
    return found, views


TRANSLATION_UNIT = (
    "one (sentence, target token) pair under teacher forcing on the reference: the step's "
    "cross-attention row over the source against each source token's importance for the "
    "log-probability of the reference token (erased: replaced by the padding token)"
)


def unit_of(run: LoadedRun) -> str:
    return "(sentence, target token) pairs" if isinstance(run.subject, Translation) else "examples"


def check_attends(run: LoadedRun, batch: dict[str, torch.Tensor]) -> None:
    if isinstance(run.subject, Translation):
        attends = bool(run.subject.attention_maps(pairs_of(batch, 1))[1])
    else:
        with torch.no_grad():
            attends = run.subject.attention(batch)[1] is not None
    if not attends:
        raise NoAttentionError(
            no_attention(f"{run.choices.get('model')} ({type(run.subject.model).__name__})")
        )


def test_sets(datamodule: AttnDataModule) -> dict:
    """The test sets explained: a bag run's main and variable-size sets (with each item's digit),
    else the main test set."""
    if datamodule.input_kind == "bags":
        return datamodule.ground_truth_sets()
    loaders = datamodule.test_dataloader()
    return {"test": loaders[0] if isinstance(loaders, list | tuple) else loaders}


def sampled_batches(
    run: LoadedRun, loader, n_examples: int, batch_size: int, seed: int, name: str
) -> list[dict[str, torch.Tensor]]:
    """A fixed sample of `n_examples` of the test set (drawn by `seed`, kept in test-set order),
    in batches of `batch_size`, each cut to its longest example (a translation's source and
    target each to its own)."""
    batches = [run.datamodule.on_after_batch_transfer(batch, 0) for batch in loader]
    total = sum(len(b[size_key(b)]) for b in batches)
    if total == 0:
        raise ConfigError(
            f"{run.run_dir}: its {name} split holds no examples, so there is nothing to explain "
            f"(check the run's data: paths.data_dir=<the folder it trained on>)"
        )
    picks = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:n_examples]
    picked = torch.zeros(total, dtype=torch.bool)
    picked[picks] = True
    rows, start = [], 0
    for batch in batches:
        size = len(batch[size_key(batch)])
        keep = picked[start : start + size]
        start += size
        if keep.any():
            rows.append({k: v[keep.to(v.device)] for k, v in batch.items()})
    widths = {k: max(r[k].shape[1] if r[k].dim() > 1 else 0 for r in rows) for k in rows[0]}
    sample = {k: torch.cat([padded(r[k], widths[k]) for r in rows]) for k in rows[0]}
    out = []
    for first in range(0, len(sample[size_key(sample)]), batch_size):
        chunk = {k: v[first : first + batch_size] for k, v in sample.items()}
        out.append({k: cut(k, v, chunk) for k, v in chunk.items()})
    return out


def size_key(batch: dict) -> str:
    """The key whose length is the batch's: a classifier's labels, a translation's sources."""
    return "labels" if "labels" in batch else "src_ids"


def cut(key: str, value: torch.Tensor, chunk: dict[str, torch.Tensor]) -> torch.Tensor:
    """A per-position tensor cut to the longest example of its side (`src_*`, `tgt_*`: their
    own mask; the rest: `mask`); (B,) as it is."""
    if value.dim() < 2:
        return value
    side = key.split("_")[0]
    mask = chunk[f"{side}_mask"] if f"{side}_mask" in chunk else chunk["mask"]
    return value[:, : int(mask.sum(dim=1).max())]


def without_nan(values: list) -> list:
    """JSON has no NaN: a measure that does not apply to an example is null."""
    return [without_nan(v) if isinstance(v, list) else (None if v != v else v) for v in values]


def padded(value: torch.Tensor, width: int) -> torch.Tensor:
    """A per-position tensor (B, T, ...) padded with zeros to (B, width, ...); (B,) as it is."""
    if value.dim() < 2 or value.shape[1] == width:
        return value
    pad = value.new_zeros(value.shape[0], width - value.shape[1], *value.shape[2:])
    return torch.cat([value, pad], dim=1)
