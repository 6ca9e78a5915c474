"""attnexp.runner.config: the resolvers conf/ uses, and Hydra's compose API over the package's configs."""

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from attnexp.runner.config import package_configs


@pytest.fixture
def no_hydra_state():
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def job_subdir(sweep_dir, task, num=0):
    """hydra.sweep.subdir as conf/hydra/default.yaml names a job of a sweep."""
    hydra = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "hydra" / "default.yaml"))
    dirname = ",".join(sorted(task))
    return OmegaConf.create(
        {
            "hydra": {
                "job": {"num": num, "override_dirname": dirname},
                "sweep": {"dir": str(sweep_dir), "subdir": hydra["sweep"]["subdir"]},
                "overrides": {"task": task},
            }
        }
    ).hydra.sweep.subdir


def test_job_dirs_are_named_by_the_swept_keys_else_by_hydras_name(tmp_path):
    task = ["trainer.max_epochs=1", "seed=0"]
    OmegaConf.save(
        {"hydra": {"overrides": {"task": ["seed=0,1", "trainer.max_epochs=1"]}}},
        tmp_path / "multirun.yaml",
    )
    assert job_subdir(tmp_path, task, num=1) == "1_seed=0"
    # `-m` with nothing swept: every override names the job, as Hydra's override_dirname does
    OmegaConf.save({"hydra": {"overrides": {"task": task}}}, tmp_path / "multirun.yaml")
    assert job_subdir(tmp_path, task) == "0_seed=0,trainer.max_epochs=1"


def test_package_configs_composes_after_a_hydra_main_and_leaves_nothing_behind(no_hydra_state):
    initialize_config_module("attnexp.conf", version_base="1.3")  # as a hydra.main run leaves it
    with package_configs():
        assert compose("train").model._target_.startswith("attnexp.")
    assert not GlobalHydra.instance().is_initialized()
