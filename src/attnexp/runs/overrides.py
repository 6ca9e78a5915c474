"""Command-line overrides: the key one sets, and one written back as a single argument."""

import re


def override_key(override: str) -> str:
    """ "+model.hidden_size=16" -> "model.hidden_size"."""
    return override.lstrip("+~").split("=", 1)[0]


def override_arg(key: str, value: object) -> str:
    """`key=value` as one command-line argument: quoted where Hydra's parser or the shell would
    split the value (sweep job dirs are named like `1_scorer=dot,seed=0`)."""
    text = str(value)
    if re.fullmatch(r"[\w./~+:@-]*", text):
        return f"{key}={text}"
    return f"\"{key}='{text}'\""
