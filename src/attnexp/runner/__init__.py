"""The work of a command: train, evaluate, predict; the trainer; building data and task from a
config; loading a finished run."""
