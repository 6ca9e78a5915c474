"""Shared fixtures: tiny generated data on disk and a config composer for in-process runs."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Token-id caches of the runs the tests start (also as subprocesses) stay out of ~/.cache.
if "ATTNEXP_CACHE" not in os.environ:
    os.environ["ATTNEXP_CACHE"] = tempfile.mkdtemp(prefix="attnexp-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ATTNEXP_CACHE"], ignore_errors=True)

from hydra import compose, initialize_config_module  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402

from attnexp.runner.config import register_resolvers  # noqa: E402

register_resolvers()
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


@pytest.fixture
def compose_cfg(tmp_path):
    """compose_cfg(*overrides) -> the composed train config, outputs under tmp_path."""

    def _compose(*overrides: str, config_name: str = "train"):
        GlobalHydra.instance().clear()
        with initialize_config_module("attnexp.conf", version_base="1.3"):
            return compose(
                config_name,
                overrides=[
                    f"paths.log_dir={tmp_path}/outputs",
                    f"paths.data_dir={tmp_path}/data",
                    *overrides,
                ],
                return_hydra_config=True,
            )

    yield _compose
    GlobalHydra.instance().clear()
