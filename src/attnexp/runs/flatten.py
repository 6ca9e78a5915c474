"""Nested configs as flat `a.b.c` keys, the form runs are compared and tabulated in."""


def flat_config(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"model": {"hidden_size": 16}} -> {"model.hidden_size": 16}; lists are values."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
