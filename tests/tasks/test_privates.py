"""The private Lightning and OmegaConf attributes of attnexp.tasks.privates exist on the installed
versions and mean what the package takes them to mean: an upgrade that changes one fails here."""

import pytorch_lightning as pl
from omegaconf import OmegaConf
from pytorch_lightning.loggers import TensorBoardLogger

from attnexp.tasks.privates import drop_writer_setting, full_key, logger_step

UPGRADE = "changed on upgrade: update attnexp/tasks/privates.py"


def test_the_logger_step_is_lightnings_batches_that_stepped():
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    loop = trainer.fit_loop.epoch_loop
    assert hasattr(loop, "_batches_that_stepped"), (
        f"pytorch_lightning {pl.__version__}: fit_loop.epoch_loop._batches_that_stepped {UPGRADE}"
    )
    loop._batches_that_stepped = 7
    assert logger_step(trainer) == 7


def test_a_writer_setting_is_dropped_from_the_tensorboard_loggers_kwargs(tmp_path):
    logger = TensorBoardLogger(str(tmp_path), purge_step=3)
    assert getattr(logger, "_kwargs", {}).get("purge_step") == 3, (
        f"pytorch_lightning {pl.__version__}: TensorBoardLogger._kwargs {UPGRADE}"
    )
    drop_writer_setting(logger, "purge_step")
    drop_writer_setting(logger, "purge_step")  # one that is not there is no error
    assert "purge_step" not in logger._kwargs


def test_the_full_key_of_a_node_is_its_dotted_path():
    cfg = OmegaConf.create({"callbacks": {"early_stopping": {"patience": 3}}})
    node = cfg.callbacks.early_stopping
    assert hasattr(node, "_get_full_key"), f"omegaconf: DictConfig._get_full_key {UPGRADE}"
    assert full_key(node) == "callbacks.early_stopping"
    assert full_key(cfg) == ""
