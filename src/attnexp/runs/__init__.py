"""What runs leave on disk: run dirs and their guards, the run record (`metrics.json`), collecting
runs, sweeps, the report, machine info."""
