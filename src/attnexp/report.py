"""`python -m attnexp.report`: the command line lives in attnexp.cli.report."""

from attnexp.cli.report import cli

if __name__ == "__main__":
    cli()
