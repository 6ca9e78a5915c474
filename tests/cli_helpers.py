"""Run `python -m attnexp ...` as a subprocess on tiny data (used by the sweep/DDP/TensorBoard tests)."""

import os
import subprocess
import sys
from pathlib import Path

# One or two batches of 16 bags from the package's embedded MNIST sample: seconds per job.
TINY = [
    "data.source=sample",
    "data.batch_size=16",
    "data.eval_bag_sizes=[1,3]",
    "data.eval_variable_max=2",
    "model.hidden_size=16",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.enable_progress_bar=false",
]


def cli_command(tmp_path: Path, *args: str, module: str = "attnexp") -> tuple[list[str], dict]:
    """The command line and environment of `python -m <module> <args>` on tiny data under
    `tmp_path` (outputs in tmp_path/outputs)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    (tmp_path / "data").mkdir(exist_ok=True)  # empty: data.source=sample serves the bags
    flags = [a for a in args if a.startswith("-")]  # -m etc. before the overrides
    overrides = [a for a in args if not a.startswith("-")]
    cmd = [
        sys.executable,
        "-m",
        module,
        *flags,
        f"paths.log_dir={tmp_path}/outputs",
        f"paths.data_dir={tmp_path}/data",
        *overrides,
    ]
    return cmd, env


def run_cli(
    tmp_path: Path, *args: str, module: str = "attnexp", timeout: float = 300
) -> subprocess.CompletedProcess:
    cmd, env = cli_command(tmp_path, *args, module=module)
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


# Imported by a run, never by what answers without one (attnexp --help / --cfg, the report).
RUN_MODULES = {"torch", "pytorch_lightning", "lightning_fabric", "datasets"}


def run_counting_imports(
    args: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`python <args>`, and the top-level packages it imported: PYTHONPROFILEIMPORTTIME (the
    same as -X importtime) writes a line per import to stderr, taken out of `result.stderr`."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    lines = result.stderr.splitlines()
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in lines
        if line.startswith("import time:")
    }
    result.stderr = "\n".join(line for line in lines if not line.startswith("import time:"))
    return result, imported


def run_cli_in_process(
    tmp_path: Path, *args: str, module: str = "attnexp", given_paths: bool = True
) -> subprocess.CompletedProcess:
    """`python -m <module> <args>` as run_cli runs it, but in this process: for a run that a test
    needs as its starting point (a run dir to evaluate, resume or hold), or whose behaviour under
    test is the runner's, where a new interpreter adds the import of torch and Lightning and tests
    nothing more (exit status, stdout and stderr come back as from run_cli). The logging
    Hydra sets up, the torch threads and the working dir are put back afterwards.
    given_paths=False: no paths.* on the command line (the run takes them from the environment)."""
    import contextlib
    import importlib
    import io
    import logging

    import torch
    from hydra.core.global_hydra import GlobalHydra

    command = "train" if module == "attnexp" else module.rsplit(".", 1)[1]  # attnexp.evaluate
    cli = importlib.import_module(f"attnexp.cli.{command}").cli
    (tmp_path / "data").mkdir(exist_ok=True)
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    paths = [f"paths.log_dir={tmp_path}/outputs", f"paths.data_dir={tmp_path}/data"]
    argv = [module, *flags, *(paths if given_paths else []), *overrides]
    root = logging.getLogger()
    handlers, level, threads = root.handlers[:], root.level, torch.get_num_threads()
    saved_argv, cwd = sys.argv, Path.cwd()
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    try:
        os.chdir(tmp_path)
        sys.argv = argv
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            cli()
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    finally:
        sys.argv = saved_argv
        os.chdir(cwd)
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_num_threads(threads)
        GlobalHydra.instance().clear()
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def compose_train(tmp: Path, *overrides: str):
    """The train config of a run whose outputs, data and cache live under `tmp` (composed as the
    CLI composes it, with the hydra node: for `train_in_process`)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module("attnexp.conf", version_base="1.3"):
        cfg = compose(
            "train",
            return_hydra_config=True,
            overrides=[
                f"paths.log_dir={tmp}/outputs",
                f"paths.data_dir={tmp}/data",
                f"data.cache_dir={tmp}/cache",
                *overrides,
            ],
        )
    GlobalHydra.instance().clear()
    return cfg
