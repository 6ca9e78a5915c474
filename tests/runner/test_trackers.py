"""MLflow and W&B beside TensorBoard: a run read back from MLflow's sqlite store with MlflowClient;
the W&B config composes offline."""

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from cli_helpers import TINY, run_cli_in_process
from omegaconf import OmegaConf

from attnexp.runner.trainer import is_subclass_target


def test_a_run_read_back_from_mlflow(tmp_path):
    """Params, each validation's metrics at their steps, the attention figures as artifacts; the
    run's TensorBoard log and record are written as before."""
    mlflow = pytest.importorskip("mlflow", reason="pip install -e '.[mlflow]'")
    args = [*TINY, "logger=mlflow", "trainer.max_epochs=2", "trainer.log_every_n_steps=1"]
    result = run_cli_in_process(tmp_path, *args)
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "completed" and list((run_dir / "tb").glob("events.out.tfevents*"))

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("attnexp")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["run_dir"] == str(run_dir)
    assert run.data.params["model.hidden_size"] == "16"
    assert run.data.params["choice.model"] == "bag_attn"
    history = client.get_metric_history(run.info.run_id, "val/acc")
    assert [m.value for m in history] == [v["val/acc"] for v in record["validations"]]
    assert run.data.metrics["final/test/acc"] == record["metrics"]["test/acc"]
    figures = client.list_artifacts(run.info.run_id, "attention/val_examples")
    assert [f.path.rsplit("step", 1)[1] for f in figures] == [f"{m.step:07d}.png" for m in history]
    assert artifact_root(experiment).is_relative_to(tmp_path / "outputs" / "mlartifacts")


def artifact_root(experiment) -> Path:
    return Path(urlparse(experiment.artifact_location).path)


def test_wandb_runs_offline_beside_tensorboard(compose_cfg):
    from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

    cfg = compose_cfg("logger=wandb")
    assert is_subclass_target(cfg.logger.wandb, WandbLogger)
    assert is_subclass_target(cfg.logger.tensorboard, TensorBoardLogger)
    assert cfg.logger.wandb.offline is True
    loggers = OmegaConf.to_container(cfg.logger)  # not resolved: paths.output_dir is a run's
    assert loggers["wandb"]["save_dir"] == loggers["tensorboard"]["save_dir"]
