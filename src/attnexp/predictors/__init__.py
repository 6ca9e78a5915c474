"""What a trained model's predictions look like, per input kind: reading raw inputs for
`python -m attnexp.predict`, naming classes, and drawing attention (predict's figures and the
per-epoch TensorBoard figures of the probe batch).

One class per kind of batch a DataModule gives (its `input_kind`): tokens (IMDB), pairs (LCQMC),
bags (bag-MNIST), translation (fra-eng, Multi30k). A DataModule loads, splits and encodes data; the predictor for its kind turns
its batches and a model's `ModelOutput` into readable results. What a predictor offers is typed in
`attnexp.predictors.contract` (`Predictor`, `RawPredictor`). A new input kind = one module here
plus one entry in `PREDICTORS`.
"""

from typing import Any

from attnexp.predictors.bags import BagPredictor
from attnexp.predictors.contract import Predictor, RawPredictor
from attnexp.predictors.pairs import PairPredictor
from attnexp.predictors.tokens import TokenPredictor
from attnexp.predictors.translation import TranslationPredictor

PREDICTORS: dict[str, type[Predictor]] = {
    "tokens": TokenPredictor,
    "pairs": PairPredictor,
    "bags": BagPredictor,
    "translation": TranslationPredictor,
}


def predictor_class(input_kind: str) -> type[Predictor]:
    """The predictor class of DataModules whose batches are `input_kind`."""
    return PREDICTORS[input_kind]


def predictor_for(datamodule: Any) -> Predictor:
    """The predictor over `datamodule` (by its `input_kind`)."""
    return predictor_class(datamodule.input_kind)(datamodule)


__all__ = [
    "PREDICTORS",
    "BagPredictor",
    "PairPredictor",
    "Predictor",
    "RawPredictor",
    "TokenPredictor",
    "TranslationPredictor",
    "predictor_class",
    "predictor_for",
]
