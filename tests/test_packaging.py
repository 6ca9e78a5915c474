"""pyproject.toml's dependency floors are the versions `make test-min` tests (.ci/min-versions.txt)."""

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# Floors that .ci/min-versions.txt does not pin, and why.
UNPINNED = {
    "torch": "installed first as $(TORCH), as for make test: only torch 2.13's CPU wheel is at hand",
    "ruff": "make test-min runs the tests, not the lint",
}


def floors() -> dict[str, Version]:
    """{package: its >= floor} over the dependencies and the extras `.[dev]` installs (its own
    and those it names, `attnexp[sweep,...]`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    lines = [*project["dependencies"], *extras["dev"]]
    for line in extras["dev"]:
        requirement = Requirement(line)
        if requirement.name == "attnexp":
            lines += [item for extra in sorted(requirement.extras) for item in extras[extra]]
    found = {}
    for line in lines:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[canonicalize_name(requirement.name)] = Version(spec.version)
    return found


def pins() -> dict[str, Version]:
    found = {}
    for line in (ROOT / ".ci" / "min-versions.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):  # not numpy<2, the floors' numpy
            name, version = line.split("==")
            found[canonicalize_name(name)] = Version(version)
    return found


def test_every_floor_is_pinned_in_the_min_versions_test():
    declared = floors()
    assert {"pytorch-lightning", "hydra-core", "datasets", "pytest"} <= declared.keys()
    tested = {name: v for name, v in declared.items() if name not in UNPINNED}
    assert pins() == tested, "make .ci/min-versions.txt pin each floor of pyproject.toml"


def test_every_package_folder_is_listed():
    """A new folder of src/attnexp must join pyproject's `packages`, or a non-editable install
    leaves it out (an editable one finds it anyway, so only a wheel would show it)."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    source = ROOT / "src"
    folders = {
        ".".join(init.parent.relative_to(source).parts)
        for init in (source / "attnexp").rglob("__init__.py")
    }
    assert folders - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_console_script_names_a_function_there_is():
    import importlib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"attnexp", "attnexp-evaluate", "attnexp-predict", "attnexp-report"} <= scripts.keys()
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target
