"""How many torch threads a run computes with (`trainer.threads`).

torch starts one thread per core. On a machine whose cores are busy with other work, every
parallel operator then waits at its barrier for a thread that is not running: on 2 busy cores a
BiLSTM step took 5.5x as long with 2 threads as with 1, a bag step 28x (docs/benchmarks.md). So
`auto` takes only the cores the load leaves free, at least one. An int sets the count, and
`OMP_NUM_THREADS` set by the user wins over both.
"""

import logging
import math
import os

from attnexp.schema import rule_for

log = logging.getLogger(__name__)


def available_cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def auto_threads(cores: int, load: float) -> int:
    """The cores that `load` (runnable processes, the 1-minute load average) leaves free, at least
    one: a thread beyond them only waits for a core, and makes every other thread wait for it."""
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def check_threads(setting) -> None:
    """trainer.threads is auto or a positive int, as declared in `attnexp.schema`."""
    rule_for("trainer.threads").check("trainer.threads", setting)


def choose_threads(setting, on_cpu: bool, environ=os.environ) -> tuple[int | None, str]:
    """(the thread count to set, or None to leave torch's; why), for a run on the CPU or not."""
    check_threads(setting)
    if environ.get("OMP_NUM_THREADS"):
        return None, f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']} (set in the environment)"
    if setting != "auto":
        return setting, f"trainer.threads={setting}"
    if not on_cpu:
        return None, "trainer.threads=auto on an accelerator: torch's default"
    cores, load = available_cores(), os.getloadavg()[0]
    threads = auto_threads(cores, load)
    return threads, f"trainer.threads=auto: {cores} cores, load average {load:.1f}"


def set_threads(setting, on_cpu: bool) -> int:
    """Applies `choose_threads` and logs what it chose; returns the count torch now uses."""
    import torch

    threads, why = choose_threads(setting, on_cpu)
    if threads is not None:
        torch.set_num_threads(threads)
    count = torch.get_num_threads()
    log.info("torch threads: %d (%s)", count, why)
    return count
