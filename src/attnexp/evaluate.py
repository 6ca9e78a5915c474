"""`python -m attnexp.evaluate`: the command line lives in attnexp.cli.evaluate."""

from attnexp.cli.evaluate import cli

if __name__ == "__main__":
    cli()
