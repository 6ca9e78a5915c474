"""`python -m attnexp.predict ckpt_path=<ckpt or run dir> text="..."`: classify raw inputs, show attention.

Works for any run whose DataModule implements the raw-input methods of `AttnDataModule`
(`raw_fields`, `check_raw`, `raw_notes`, `encode_raw`, `prediction_label`, `prediction_figures`).
The run's `.hydra/config.yaml` and saved artifacts (e.g. its tokenizer) rebuild the DataModule and
the model without touching the dataset; the checkpoint's weights are loaded strictly.

Inputs: the DataModule's raw fields as `key=value` arguments (`text=...`, or `text_a=... text_b=...`),
taken verbatim (no Hydra quoting needed), or `texts_file=` with one example per line (fields
tab-separated). Output: one line per example (label, probability, notes), `predictions.jsonl`, and
per-example attention figures (PNG + self-contained HTML) in `out_dir`.
"""

import json
import logging
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from attnexp.build import build_model, check_config
from attnexp.checkpoints import load_run, load_weights
from attnexp.config import register_resolvers
from attnexp.data.base import AttnDataModule
from attnexp.errors import ConfigError
from attnexp.runs import new_run_name

log = logging.getLogger(__name__)
register_resolvers()


def split_args(argv: list[str], raw_keys: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """Raw text arguments (`text=...`, taken verbatim) apart from Hydra overrides of predict.yaml."""
    raw, overrides = {}, []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in raw_keys:
            raw[key] = value
        else:
            overrides.append(arg)
    return raw, overrides


def compose_predict_cfg(overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("attnexp.conf", version_base="1.3"):
            return compose("predict", overrides=overrides)
    except Exception as err:  # Hydra's override/config errors
        raise ConfigError(f"predict: {err}") from err
    finally:
        GlobalHydra.instance().clear()


def load_predictor(cfg: DictConfig) -> tuple[AttnDataModule, torch.nn.Module, Path, Path]:
    """(DataModule with its artifacts loaded, model with the checkpoint's weights, run dir, ckpt)."""
    run_cfg, choices, run_dir, ckpt = load_run(cfg.ckpt_path, list(cfg.overrides))
    check_config(run_cfg, choices)
    datamodule: AttnDataModule = instantiate(run_cfg.data)
    datamodule.load_artifacts(str(run_dir))
    datamodule.setup("predict")
    model = build_model(run_cfg.model, datamodule)
    task = instantiate(
        run_cfg.task,
        model=model,
        num_classes=datamodule.num_classes,
        test_set_names=datamodule.test_set_names,
    )
    load_weights(task, ckpt)
    return datamodule, model.eval().to(cfg.device), run_dir, ckpt


def read_examples(
    cfg: DictConfig, raw: dict[str, str], fields: tuple[str, ...]
) -> list[dict[str, str]]:
    if not fields:
        raise ConfigError(
            "this run's DataModule takes no raw inputs (raw_fields is empty): predict needs text models"
        )
    examples = []
    if any(f in raw for f in fields):
        missing = [f for f in fields if f not in raw]
        if missing:
            raise ConfigError(
                f"missing {', '.join(f'{m}=...' for m in missing)} (this model reads {', '.join(fields)})"
            )
        examples.append({f: raw[f] for f in fields})
    if cfg.texts_file is not None:
        path = Path(cfg.texts_file).expanduser()
        if not path.is_file():
            raise ConfigError(f"texts_file={path} does not exist")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            parts = line.split("\t") if len(fields) > 1 else [line]
            if len(parts) != len(fields):
                raise ConfigError(
                    f"{path}:{number}: {len(parts)} tab-separated field(s), expected {len(fields)} ({', '.join(fields)})"
                )
            examples.append(dict(zip(fields, parts, strict=True)))
    if not examples:
        raise ConfigError(
            f"nothing to predict: give {' '.join(f'{f}=...' for f in fields)} or texts_file=<file>"
        )
    return examples


def predict(cfg: DictConfig, raw: dict[str, str]) -> list[dict]:
    datamodule, model, run_dir, ckpt = load_predictor(cfg)
    examples = read_examples(cfg, raw, datamodule.raw_fields)
    out_dir = (
        Path(cfg.out_dir)
        if cfg.out_dir
        else Path(cfg.paths.log_dir) / "predictions" / new_run_name()
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [{"input": ex, "problem": datamodule.check_raw(ex)} for ex in examples]
    valid = [i for i, r in enumerate(results) if r["problem"] is None]
    for start in range(0, len(valid), cfg.batch_size):
        chunk = valid[start : start + cfg.batch_size]
        batch = {
            k: v.to(cfg.device)
            for k, v in datamodule.encode_raw([examples[i] for i in chunk]).items()
        }
        with torch.no_grad():
            logits, attention = model(**batch, return_attention=True)
        probs = logits.float().softmax(-1).cpu()
        stems = [
            out_dir / f"example{i:04d}" if cfg.figures and i < cfg.max_figures else None
            for i in chunk
        ]
        files = datamodule.prediction_figures(batch, probs, attention, stems) if any(stems) else []
        for row, i in enumerate(chunk):
            label = int(probs[row].argmax())
            results[i].update(
                label=datamodule.prediction_label(label),
                probability=round(float(probs[row, label]), 4),
                probabilities=[round(float(p), 4) for p in probs[row]],
                notes=datamodule.raw_notes(examples[i]),
                files=[
                    str(f) for f in files if stems[row] is not None and f.stem == stems[row].name
                ],
            )
    with open(out_dir / "predictions.jsonl", "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    log.info("checkpoint %s (run %s); outputs in %s", ckpt, run_dir, out_dir)
    return results


def format_result(result: dict) -> str:
    shown = " | ".join(result["input"].values())
    shown = shown if len(shown) <= 70 else shown[:67] + "..."
    if result["problem"] is not None:
        return f"-         (no prediction: {result['problem']})  {shown!r}"
    lines = [f"{result['label']:<9} {result['probability']:.4f}  {shown!r}"]
    lines += [f"          note: {n}" for n in result["notes"]]
    lines += [f"          attention: {f}" for f in result["files"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    try:
        raw, overrides = split_args(argv, ("text", "text_a", "text_b"))
        cfg = compose_predict_cfg(overrides)
        results = predict(cfg, raw)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for result in results:
        print(format_result(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
