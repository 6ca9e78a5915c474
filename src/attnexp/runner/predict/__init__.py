"""The work of `python -m attnexp.predict` (see `attnexp.predict`, its command line): load a run's
model and DataModule from its saved config and artifacts, classify (or translate) raw inputs,
write predictions.jsonl and the attention figures.

One concept per module: `settings` (predict.yaml's own keys), `outputs` (the output guard),
`inputs` (raw inputs and decoding), `loading` (a run loaded for its inputs), `compare` (a folder of
runs), `batches` (the answers, batch by batch).
"""

import json
import logging
from pathlib import Path

from omegaconf import DictConfig

from attnexp.runner.config import register_resolvers
from attnexp.runner.predict.batches import predict_examples
from attnexp.runner.predict.compare import (
    figure_folders,
    load_compared,
    run_caption,
    runs_to_compare,
)
from attnexp.runner.predict.inputs import decode_settings, texts_file_lines
from attnexp.runner.predict.loading import LoadedRun, load_predictor
from attnexp.runner.predict.outputs import (
    COMPARE_FILE,
    PREDICTIONS_FILE,
    check_figure_folders,
    check_prediction_dir,
)
from attnexp.runner.predict.settings import check_device, check_predict_settings
from attnexp.runs.naming import new_run_name

log = logging.getLogger(__name__)
register_resolvers()

__all__ = [
    "COMPARE_FILE",
    "PREDICTIONS_FILE",
    "LoadedRun",
    "check_device",
    "decode_settings",
    "figure_folders",
    "load_predictor",
    "predict",
    "runs_to_compare",
    "texts_file_lines",
]


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
        loaded = {None: load_predictor(cfg, raw, lines, cfg.ckpt_path)}
    else:  # a refused run leaves no half-written output
        folders = figure_folders([run.name for run in runs])
        if cfg.figures:
            check_figure_folders(out_dir, folders.values())
        loaded = load_compared(cfg, raw, lines, runs)
    out_dir.mkdir(parents=True, exist_ok=given_dir)  # the default one is always new
    results = []
    for name, run in loaded.items():
        figures_dir = out_dir if name is None else out_dir / folders[name]
        # compare.html shades the weights whether or not predictions.jsonl keeps them
        with_attention = cfg.attention or (name is not None and cfg.figures)
        run_results = predict_examples(cfg, run, figures_dir, with_attention)
        results += [r if name is None else {"run": name, **r} for r in run_results]
        log.info("checkpoint %s (run %s)", run.ckpt, run.run_dir)
    with open(out_dir / PREDICTIONS_FILE, "w", encoding="utf-8") as f:
        for r in results:
            if not cfg.attention:  # kept for compare.html only
                r = {k: v for k, v in r.items() if k not in ("tokens", "attention")}
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if runs is not None and cfg.figures:
        from attnexp.viz.text import save_comparison  # matplotlib: only where figures are drawn

        captions = {r.name: run_caption(r) for r in runs}
        save_comparison(results, captions, out_dir / COMPARE_FILE, cfg.max_figures)
    log.info("outputs in %s", out_dir)
    return results
