"""`python -m attnexp.explain`: the command line lives in attnexp.cli.explain."""

from attnexp.cli.explain import cli

if __name__ == "__main__":
    cli()
