from attnexp.train import cli

cli()
