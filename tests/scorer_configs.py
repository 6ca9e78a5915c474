"""The scorers the property tests in tests/modules run on, found by globbing conf/scorer/.

Each `conf/scorer/<name>.yaml` is built as the runner builds it (its `_target_` with its own
arguments, `_partial_`), so a new scorer is tested (shapes, gradients, bf16, padding, an
all-padding row) without a new test. SimpleScorer has no yaml (bag_attn's `model.attention=simple`
builds it), so it is added by hand.
"""

from functools import partial
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from attnexp.modules.scorers import SimpleScorer

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def scorer_factories() -> dict[str, partial]:
    """name -> `factory(key_dim=..., query_dim=...)`, from every conf/scorer/*.yaml (+ simple)."""
    factories = {
        path.stem: instantiate(OmegaConf.load(path))
        for path in sorted((CONF_DIR / "scorer").glob("*.yaml"))
    }
    return {**factories, "simple": partial(SimpleScorer)}


def needs_query(factory: partial) -> bool:
    return factory.func.needs_query


def scorer_params() -> list:
    """pytest params, one per scorer option (id: the option's name)."""
    return [pytest.param(factory, id=name) for name, factory in scorer_factories().items()]


def pooling_params() -> list:
    """(factory, query) pytest params: each scorer with every query kind it takes."""
    return [
        pytest.param(factory, query, id=f"{name}-{query}")
        for name, factory in scorer_factories().items()
        for query in (("learned", "mean") if needs_query(factory) else ("none",))
    ]
