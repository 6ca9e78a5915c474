"""What a predictor is, as types: `Predictor` draws a model's attention on the probe batch during
training (every input kind), `RawPredictor` also reads raw inputs for `python -m attnexp.predict`
(the kinds with `raw_fields`)."""

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from matplotlib.figure import Figure

from attnexp.predictors.answers import BatchAnswer

View = tuple[list[str], dict[str, torch.Tensor]]  # an example's tokens, their weight per view


@runtime_checkable
class Predictor(Protocol):
    """Over a DataModule of one input kind (`predictor_for`)."""

    raw_fields: tuple[str, ...]  # the CLI keys of one raw example; () where predict reads none

    def attention_figure(
        self, batch: dict[str, torch.Tensor], logits: torch.Tensor, attention: Any
    ) -> Figure | dict[str, Figure] | None:
        """The probe batch's attention, one figure or one per tag (None: nothing to draw)."""
        ...

    def probe_texts(self, batch: dict[str, torch.Tensor], task: Any) -> dict[str, str]:
        """What the model makes of the probes in words, per tag ({} where figures say it all)."""
        ...


@runtime_checkable
class RawPredictor(Predictor, Protocol):
    """A predictor that also reads raw examples (dicts of its `raw_fields`)."""

    def check_raw(self, example: dict[str, str]) -> str | None:
        """Why this example cannot be predicted, or None if it can."""
        ...

    def raw_notes(self, example: dict[str, str]) -> list[str]:
        """What the user should know about how the example was read."""
        ...

    def encode_raw(self, examples: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        """Raw examples -> a model batch (no labels), exactly as in training."""
        ...

    def predict_batch(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor], **decode: Any
    ) -> BatchAnswer: ...

    def prediction_attention(self, batch: dict, attention: Any) -> list[View]:
        """Per example: its tokens and the weight each receives per view."""
        ...

    def prediction_figures(
        self,
        batch: dict,
        scores: Any,
        attention: Any,
        views: list[View],
        out_stems: list[Path | None],
    ) -> list[Path]:
        """The figure files of each example with a stem."""
        ...
