"""The project's error type for bad user input (configs, data files, CLI arguments)."""


class ConfigError(ValueError):
    """A setting or an input that cannot work; the message names the value, the rule and the key."""
