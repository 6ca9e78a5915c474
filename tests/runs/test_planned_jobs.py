"""A sweep's report lists the jobs it planned that never ran (a sweep killed part way)."""

from pathlib import Path

from omegaconf import OmegaConf

from attnexp.runs.collect import Run
from attnexp.runs.report import jobs_never_run
from attnexp.runs.search import SWEEPER_TARGET
from attnexp.runs.sweeps import MULTIRUN_FILE, planned_jobs

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def sweep_dir(tmp_path: Path, task: list[str], sweeper: str = BASIC, params=None) -> Path:
    hydra = {"sweeper": {"_target_": sweeper, "params": params}, "overrides": {"task": task}}
    OmegaConf.save({"hydra": hydra, "seed": 0}, tmp_path / MULTIRUN_FILE)
    return tmp_path


def run_with(settings: dict[str, str]) -> Run:
    return Run(Path("r"), "r", "completed", 0, settings, {})


def test_the_jobs_are_the_product_of_the_swept_values(tmp_path):
    root = sweep_dir(tmp_path, ["model=bag_attn", "scorer=dot,additive", "seed=range(0,2)"])
    assert planned_jobs(root) == [
        ["model=bag_attn", "scorer=dot", "seed=0"],
        ["model=bag_attn", "scorer=dot", "seed=1"],
        ["model=bag_attn", "scorer=additive", "seed=0"],
        ["model=bag_attn", "scorer=additive", "seed=1"],
    ]


def test_the_sweepers_own_params_are_swept_too(tmp_path):
    root = sweep_dir(tmp_path, ["seed=1"], params={"scorer": "dot,bilinear"})
    assert planned_jobs(root) == [["seed=1", "scorer=dot"], ["seed=1", "scorer=bilinear"]]


def test_unknown_where_it_cannot_be_told(tmp_path):
    assert planned_jobs(tmp_path) is None  # no multirun.yaml: a folder of single runs
    assert planned_jobs(sweep_dir(tmp_path, ["seed=0,1"], sweeper=SWEEPER_TARGET)) is None


def test_the_report_names_the_jobs_that_left_no_record(tmp_path):
    root = sweep_dir(tmp_path, ["model=bag_attn", "scorer=dot,additive,bilinear"])
    ran = [run_with({"model": "bag_attn", "scorer": "dot", "seed": "0"})]
    assert jobs_never_run(root, ran) == [
        ["model=bag_attn", "scorer=additive"],
        ["model=bag_attn", "scorer=bilinear"],
    ]
    assert jobs_never_run(tmp_path / "nothing", ran) == []
