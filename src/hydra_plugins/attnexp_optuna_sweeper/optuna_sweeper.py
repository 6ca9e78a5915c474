"""The Sweeper Hydra instantiates from `hydra.sweeper`, and its configs in Hydra's ConfigStore:
`hydra/sweeper=attnexp_optuna`, `hydra/sweeper/sampler=tpe|random`,
`hydra/sweeper/pruner=nop|median|successive_halving|hyperband|threshold`.

The keys are hydra-optuna-sweeper's (`storage`, `study_name`, `n_trials`, `n_jobs`, `direction`,
`sampler`, `params`), plus `pruner` and `monitor` (the metric each validation reports to its
trial). Hydra imports every `hydra_plugins` module when it starts, so this one imports neither
Optuna nor torch: the search itself is `attnexp.runs.search`, imported once a sweep starts.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.attnexp_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    defaults: list[Any] = field(
        default_factory=lambda: ["_self_", {"sampler": "tpe"}, {"pruner": "nop"}]
    )
    sampler: Any = None  # an Optuna sampler (a _target_ node): hydra/sweeper/sampler=...
    pruner: Any = None  # an Optuna pruner: hydra/sweeper/pruner=...
    direction: str = "maximize"
    # null: a sqlite file in the sweep dir (optuna.db); sqlite:///<file> or a PostgreSQL URL to
    # share the study between machines or continue it later
    storage: str | None = None
    study_name: str = "attnexp"
    n_trials: int = 20  # finished trials (completed, pruned, failed) the study is to reach
    n_jobs: int = 1  # trials launched at once (the launcher runs them: parallel, submitit, ...)
    monitor: str | None = None  # reported to the trial at each validation, for the pruner
    params: dict[str, str] | None = None


SAMPLERS = {
    "tpe": {"_target_": "optuna.samplers.TPESampler", "seed": None, "n_startup_trials": 10},
    "random": {"_target_": "optuna.samplers.RandomSampler", "seed": None},
}
PRUNERS = {
    "nop": {"_target_": "optuna.pruners.NopPruner"},
    "median": {
        "_target_": "optuna.pruners.MedianPruner",
        "n_startup_trials": 5,
        "n_warmup_steps": 0,
        "interval_steps": 1,
        "n_min_trials": 1,
    },
    "successive_halving": {
        "_target_": "optuna.pruners.SuccessiveHalvingPruner",
        "min_resource": "auto",
        "reduction_factor": 4,
        "min_early_stopping_rate": 0,
    },
    "threshold": {
        "_target_": "optuna.pruners.ThresholdPruner",
        "lower": None,
        "upper": None,
        "n_warmup_steps": 0,
        "interval_steps": 1,
    },
    "hyperband": {
        "_target_": "optuna.pruners.HyperbandPruner",
        "min_resource": 1,
        "max_resource": "auto",
        "reduction_factor": 3,
    },
}

store = ConfigStore.instance()
store.store(
    group="hydra/sweeper", name="attnexp_optuna", node=OptunaSweeperConf, provider="attnexp"
)
for name, node in SAMPLERS.items():
    store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="attnexp")
for name, node in PRUNERS.items():
    store.store(group="hydra/sweeper/pruner", name=name, node=node, provider="attnexp")


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        sampler: Any,
        pruner: Any,
        direction: str,
        storage: str | None,
        study_name: str,
        n_trials: int,
        n_jobs: int,
        monitor: str | None,
        params: dict[str, str] | None,
    ) -> None:
        self.sampler, self.pruner = sampler, pruner
        self.direction = direction
        self.storage, self.study_name = storage, study_name
        self.n_trials, self.n_jobs = n_trials, n_jobs
        self.monitor = monitor
        self.params = dict(params or {})

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        from attnexp.runs import search

        # Hydra built the sampler and pruner from their _target_s
        search.check_settings(self.n_trials, self.n_jobs, self.pruner, self.monitor)
        storage = search.storage_url(self.storage, self.config.hydra.sweep.dir)
        study = search.make_study(
            storage, self.study_name, self.direction, self.sampler, self.pruner
        )
        space, fixed = search.search_space(self.params, arguments)

        def launch(batch: list[list[str]], first_job: int) -> list[Any]:
            self.validate_batch_is_legal(batch)
            return list(self.launcher.launch(batch, initial_job_idx=first_job))

        search.search(study, space, fixed, self.n_trials, self.n_jobs, launch)
