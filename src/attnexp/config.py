"""OmegaConf resolvers used by conf/ (registered before Hydra composes)."""

from omegaconf import OmegaConf

from attnexp.runs import hydra_subdir, new_run_name, resolve_run_dir
from attnexp.sweeps import sweep_subdir


def register_resolvers() -> None:
    resolvers = {
        "attnexp.run_name": lambda: new_run_name(),
        "attnexp.run_dir": lambda resume, root, overrides: resolve_run_dir(
            resume, root, list(overrides)
        ),
        "attnexp.hydra_subdir": hydra_subdir,
        "attnexp.sweep_subdir": lambda num, sweep_dir, overrides, fallback, params=None: (
            sweep_subdir(num, sweep_dir, list(overrides), fallback, params)
        ),
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn, use_cache=True)
