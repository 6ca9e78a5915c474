"""A training run's final metrics: what its last epoch logged, val/* of its best checkpoint's
validation (and of its last as val/*_last), the best checkpoint's score, its test/*."""

from pathlib import Path

import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from attnexp.files import checkpoint_value
from attnexp.runs.record import RunRecord


def scalar_metrics(metrics: dict) -> dict[str, float]:
    return {
        k: float(v) for k, v in sorted(metrics.items()) if torch.is_tensor(v) and v.numel() == 1
    }


def last_epoch_metrics(record: RunRecord) -> dict[str, float]:
    """What the last recorded epoch logged (train/*, lr-*, its validation's val/*)."""
    history = record.data.get("history") or [{}]
    return {k: v for k, v in history[-1].items() if k not in ("epoch", "step")}


def checkpoint_step(path: str | Path) -> int:
    """The global step a Lightning checkpoint was saved at (memory-mapped: reads little)."""
    return int(checkpoint_value(path, "global_step"))


def validation_at(record: RunRecord, step: int) -> dict | None:
    """val/* of the validation at global step `step` (the last one there), from the record."""
    rows = [row for row in record.data["validations"] if row["step"] == step]
    return {k: v for k, v in rows[-1].items() if k.startswith("val/")} if rows else None


def with_val_of(
    metrics: dict, best_val: dict | None, last_val: dict[str, float], record: RunRecord
) -> dict:
    """val/* of the tested (best) checkpoint, and the last validation's (`last_val`, from the
    record: a resumed attempt that trained on past the run's last validation validated nothing)
    as val/*_last; `metrics`' own val/* are dropped."""
    last = {f"{k}_last": v for k, v in last_val.items()}
    rest = {k: v for k, v in metrics.items() if not k.startswith("val/")}
    if best_val is None:
        record.warn("no validation recorded at the best checkpoint's step: only val/*_last")
        best_val = {}
    return {**rest, **best_val, **last}


def best_score(checkpoint: ModelCheckpoint, best_path: str) -> float:
    """The monitored value of the best checkpoint. ddp_spawn hands the main process only the
    best path, so then the score comes from the checkpoint's own callback state."""
    if checkpoint.best_model_score is not None:
        return float(checkpoint.best_model_score)
    state = torch.load(best_path, map_location="cpu", weights_only=True)
    for key, value in state.get("callbacks", {}).items():
        if key.startswith("ModelCheckpoint") and value.get("best_model_score") is not None:
            return float(value["best_model_score"])
    raise RuntimeError(f"no best_model_score in {best_path}")
