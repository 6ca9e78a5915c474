"""A run's settings as TensorBoard's HPARAMS tab (and MLflow's params) show them."""

from omegaconf import DictConfig, OmegaConf

from attnexp.runs.flatten import flat_config

# The parts of a config that define the experiment (not where files go or how they are logged).
HPARAM_KEYS = ("seed", "data", "model", "scorer", "optimizer", "scheduler", "task", "trainer")
# Keys that differ between runs without changing what they compute, or repeat another section
# (the task holds the optimizer and scheduler configs again, a model with a scorer the scorer's).
HPARAM_NOISE = {
    "trainer": ("default_root_dir", "enable_progress_bar"),
    "data": ("num_workers",),
    "task": ("optimizer", "scheduler"),
    "model": ("scorer",),
}


def run_hparams(cfg: DictConfig, choices: dict, data_source: str) -> dict:
    """A run's settings for TensorBoard's HPARAMS tab: the config sections that define the
    experiment, less HPARAM_NOISE, plus what tells runs apart at a glance: the options chosen and
    the data actually read ("auto" in the config may have been the full dataset or the sample)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    hparams = {key: config[key] for key in HPARAM_KEYS if key in config}
    for section, keys in HPARAM_NOISE.items():
        for key in keys:
            hparams.get(section, {}).pop(key, None)
    return {**hparams, "choice": dict(choices), "data_source": data_source}


def flatten_hparams(tree: dict) -> dict:
    """Nested config -> {"model.hidden_size": 256, ...} with TensorBoard-friendly leaf types (an
    empty section is no setting)."""
    return {
        name: value if isinstance(value, int | float | str | bool) else str(value)
        for name, value in flat_config(tree).items()
        if value != {}
    }
