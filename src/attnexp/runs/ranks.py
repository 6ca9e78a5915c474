"""Which process of a multi-process run this is: only rank 0 writes the run's record."""

import os


def is_other_rank() -> bool:
    """A rank > 0 that re-ran the command line (Lightning's ddp/fsdp launcher, torchrun, SLURM):
    it shares rank 0's run dir, so it must not write the run record."""
    return any(os.environ.get(key, "0") != "0" for key in ("LOCAL_RANK", "RANK", "SLURM_PROCID"))
