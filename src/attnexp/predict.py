"""`python -m attnexp.predict`: the command line lives in attnexp.cli.predict."""

from attnexp.cli.predict import cli

if __name__ == "__main__":
    cli()
