"""Every predictor meets the typed contract the callbacks and predict rely on."""

import pytest

from attnexp.predictors import PREDICTORS, Predictor, RawPredictor


@pytest.mark.parametrize("kind", sorted(PREDICTORS))
def test_every_predictor_meets_its_contract(kind):
    predictor = PREDICTORS[kind](datamodule=None)
    assert isinstance(predictor, Predictor)
    assert isinstance(predictor, RawPredictor) == bool(predictor.raw_fields), (
        f"{kind}: a predictor with raw_fields reads raw inputs (RawPredictor), one without none"
    )
