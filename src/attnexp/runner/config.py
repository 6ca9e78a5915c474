"""OmegaConf resolvers used by conf/ (registered before Hydra composes), and Hydra's compose API
over the package's configs."""

from collections.abc import Iterator
from contextlib import contextmanager

from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from attnexp.runs.naming import new_run_name
from attnexp.runs.resume import resolve_run_dir
from attnexp.runs.sweeps import sweep_subdir


def register_resolvers() -> None:
    resolvers = {
        "attnexp.run_name": lambda: new_run_name(),
        "attnexp.run_dir": lambda resume, root, overrides: resolve_run_dir(
            resume, root, list(overrides)
        ),
        "attnexp.sweep_subdir": lambda num, sweep_dir, overrides, fallback: sweep_subdir(
            num, sweep_dir, list(overrides), fallback
        ),
        "attnexp.slurm_gpus": slurm_gpus,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn, use_cache=True)


def slurm_gpus(accelerator: str, devices: object) -> object:
    """hydra/launcher=slurm's GPUs per node: one per device, none for a CPU trainer."""
    return None if str(accelerator) == "cpu" else devices


@contextmanager
def package_configs() -> Iterator[None]:
    """`hydra.compose` over `attnexp.conf` inside the block; no global Hydra state is left behind
    (nor taken over from a `hydra.main` that has run in the same process)."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("attnexp.conf", version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().clear()
