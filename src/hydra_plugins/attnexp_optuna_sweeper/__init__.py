"""attnexp's Optuna sweeper for Hydra (`hydra/sweeper=attnexp_optuna`): Optuna >= 4 through its
ask-and-tell API, with pruning from inside the runs. Hydra finds it in the `hydra_plugins`
namespace package."""
