"""A run loaded for predicting: its DataModule with its artifacts, its model with the
checkpoint's weights, the examples it will read."""

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from attnexp.data.base import AttnDataModule
from attnexp.runner.build import build_model, check_config, instantiate_checked
from attnexp.runner.load import (
    load_run,
    load_weights,
    longer_than_trained,
    read_weights,
    run_settings_hint,
)
from attnexp.runner.predict.inputs import decode_settings, raw_fields_of, read_examples

log = logging.getLogger(__name__)


@dataclass
class LoadedRun:
    """A run loaded for predicting: its DataModule, its model, the examples it will read, and
    how it decodes (translation; {} for a classifier)."""

    run_dir: Path
    ckpt: Path
    datamodule: AttnDataModule
    model: torch.nn.Module
    examples: list[dict[str, str]]
    decode: dict


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


def load_predictor(
    cfg: DictConfig, raw: dict[str, str], lines: list[str] | None, ckpt_path: str | Path
) -> LoadedRun:
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
    return LoadedRun(run_dir, ckpt, datamodule, model, examples, decode)
