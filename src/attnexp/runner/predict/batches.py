"""A loaded run's answers to its examples, batch by batch: labels or translations, notes, the
attention figures and weights."""

from pathlib import Path

import torch
from omegaconf import DictConfig

from attnexp.predictors import RawPredictor, predictor_for
from attnexp.runner.predict.loading import LoadedRun


def predict_examples(
    cfg: DictConfig, run: LoadedRun, out_dir: Path, with_attention: bool
) -> list[dict]:
    """Each example's answer (label and probabilities, or translation and score: the predictor's
    `predict_batch`), notes, figure files and (`with_attention`, for a model with attention)
    tokens and attention weights; the figures go to `out_dir`. The model is on `cfg.device` while
    it predicts: a comparison holds one run's model there at a time."""
    examples = run.examples
    reader: RawPredictor = predictor_for(run.datamodule)  # raw_fields_of refused the others
    model = run.model.to(cfg.device)
    results = [{"input": ex, "problem": reader.check_raw(ex)} for ex in examples]
    valid = [i for i, r in enumerate(results) if r["problem"] is None]
    for start in range(0, len(valid), cfg.batch_size):
        chunk = valid[start : start + cfg.batch_size]
        batch = {
            k: v.to(cfg.device) for k, v in reader.encode_raw([examples[i] for i in chunk]).items()
        }
        with torch.no_grad():
            answer = reader.predict_batch(model, batch, **run.decode)
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
    run.model.cpu()
    return results


def attention_fields(tokens: list[str], per_view: dict[str, torch.Tensor]) -> dict:
    """An example's tokens and the attention each receives per view, for predictions.jsonl: what
    its HTML page shades, as numbers (every example, also those past max_figures)."""
    return {
        "tokens": tokens,
        "attention": {view: [round(float(w), 6) for w in ws] for view, ws in per_view.items()},
    }
