from attnexp.cli.train import cli

cli()
