"""Entry points: parse the command line, compose the config, start the runner. No torch or
Lightning at import: `--help` and a misspelt key are answered in a fraction of a second."""
