"""What computed a run: the machine, libraries and source a recorded number depends on.

The same commit and seed can give different accuracies on two CPUs: torch picks its kernels by the
CPU's vector instructions (AVX2, AVX-512, ...), and a different summation order changes a 15-epoch
run by about as much as a different seed. So every run records where it ran, and a number repeats
exactly only where this record does.
"""

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
PACKAGE_DIR = Path(__file__).resolve().parent
NOT_RECORDED = "not recorded"  # the machine of a record that names none


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's name, family and model ("AMD EPYC (family 25, model 17)"), from /proc/cpuinfo on
    Linux; elsewhere whatever `platform` knows."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        # The first processor's block names the CPU (the others repeat it); the first value
        # of a key wins. Keep reading past it: ARM boards name themselves in a block after
        # the processors' (Raspberry Pi: "Model : Raspberry Pi 4 Model B").
        if sep:
            fields.setdefault(key.strip(), value.strip())
    name = (
        fields.get("model name")
        or fields.get("Model")
        or platform.processor()
        or platform.machine()
    )
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE_DIR), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):  # no git on this machine, or it hangs
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_commit() -> str | None:
    """The git commit the running code was checked out at, with "+dirty" when the checkout differs
    from it (changed or new files that git does not ignore). None when the running code is not
    tracked by a checkout: a `pip install .`, even into a .venv inside the checkout."""
    if _git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None
    changed = _git("status", "--porcelain")
    return commit + ("+dirty" if changed else "")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def describe_machine() -> dict:
    """The facts a run's numbers depend on beyond its config and seed, for `metrics.json`."""
    import torch  # here, not above: the report reads records (machine_label) without torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the kernels torch picked
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "cuda": torch.version.cuda if gpus else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": _version("pytorch-lightning"),
        "commit": source_commit(),
    }


def machine_label(machine: dict | None, torch_threads: int | None = None) -> str:
    """One line naming what decides the numbers: "AMD EPYC (...), AVX512, 1 torch thread, torch
    2.13.0+cpu"; "not recorded" for a record that names no machine.

    `torch_threads`: the threads the run trained with (the record's `torch_threads`, set after
    the machine was described at the record's start); else the machine's count then."""
    if not machine:
        return NOT_RECORDED
    threads = torch_threads or machine.get("torch_threads")
    parts = [
        str(machine.get("cpu")),
        str(machine.get("cpu_capability")),
        f"{threads} torch thread{'' if threads == 1 else 's'}",
        f"torch {machine.get('torch')}",
        *(machine.get("gpus") or []),
    ]
    return ", ".join(parts)
