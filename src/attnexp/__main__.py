from attnexp.cli import cli

cli()
