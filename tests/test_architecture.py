"""The import direction of the package's layers, read from the source with `ast` (nothing is
imported to check it), and the entry points' promise to import no torch before a run starts."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnexp"

# Lowest first. A part may import its own layer and those below it, never one above. The shared
# leaves (errors, files, rules, schema, the package's own __init__) sit at the bottom; the launchers of
# `python -m attnexp[.evaluate|.explain|.predict|.report]` at the top.
LAYERS = (
    {"attnexp", "errors", "files", "rules", "schema"},
    {"modules"},
    {"models"},
    {"faithfulness"},
    {"viz"},
    {"data", "tasks", "predictors"},
    {"runs"},
    {"runner"},
    {"cli"},
    {"__main__", "evaluate", "explain", "predict", "report"},
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
# not in modules/, models/, faithfulness/
FRAMEWORKS = {"pytorch_lightning", "lightning", "hydra", "omegaconf"}
HEAVY = {"torch", "pytorch_lightning", "lightning", "torchmetrics"}  # not at import in cli/


def part_of(module: str) -> str:
    """ "attnexp.runs.record" -> "runs"; "attnexp.errors" -> "errors"; "attnexp" -> "attnexp"."""
    names = module.split(".")
    return names[1] if len(names) > 1 else names[0]


def source_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path, package: Path | None = None) -> str:
    names = path.relative_to((package or PACKAGE).parent).with_suffix("").parts
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imports(
    path: Path, top_level_only: bool = False, package: Path | None = None
) -> list[tuple[int, str]]:
    """(line, module) of each import in `path`; with `top_level_only`, those that run when the
    module is imported (not those inside a function or class body)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = top_level_statements(tree) if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import: resolve it against this module's package
                names = module_name(path, package).split(".")
                names = names if path.name == "__init__.py" else names[:-1]
                base = names[: len(names) - node.level + 1]
                found.append((node.lineno, ".".join([*base, *filter(None, [node.module])])))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def top_level_statements(tree: ast.Module):
    """Statements that run at import: the module body, and inside its if/try/with blocks."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If | ast.Try | ast.With):
            pending += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            pending += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(module_name(path)) for path in source_files()}
    assert parts - RANK.keys() == set(), "give the new part its place in LAYERS"


def test_nothing_imports_a_layer_above_its_own():
    upward = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target} ({part_of(target)} is above "
        f"{part_of(module_name(path))})"
        for path in source_files()
        for line, target in imports(path)
        if target.split(".")[0] == "attnexp"
        and RANK[part_of(target)] > RANK[part_of(module_name(path))]
    ]
    assert upward == []


@pytest.mark.parametrize("part", ["modules", "models", "faithfulness"])
def test_modules_models_and_measures_are_framework_free(part):
    found = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for path in sorted((PACKAGE / part).rglob("*.py"))
        for line, target in imports(path)
        if target.split(".")[0] in FRAMEWORKS
    ]
    assert found == []


def test_modules_import_nothing_of_attnexp_but_errors_and_themselves():
    found = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for path in sorted((PACKAGE / "modules").rglob("*.py"))
        for line, target in imports(path)
        if target.split(".")[0] == "attnexp" and part_of(target) not in ("modules", "errors")
    ]
    assert found == []


def test_cli_imports_no_torch_at_import():
    found = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for path in sorted((PACKAGE / "cli").rglob("*.py"))
        for line, target in imports(path, top_level_only=True)
        if target.split(".")[0] in HEAVY
    ]
    assert found == []


def test_the_entry_points_import_no_torch_until_a_run_starts():
    """What cli/ imports at module level must not pull torch in either (the check above sees only
    cli/'s own lines): --help and a misspelt key are answered in a fraction of a second."""
    code = (
        "import sys\n"
        "import attnexp.cli.train, attnexp.cli.evaluate, attnexp.cli.predict, attnexp.cli.report\n"
        "import attnexp.cli.explain\n"
        f"print(sorted(m for m in {sorted(HEAVY)} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_checks_see_an_upward_import(tmp_path):
    """The checks are only as good as their reading of imports: a models/ file that imports
    Lightning and, relatively or inside a function, the runner and the CLI is caught."""
    package = tmp_path / "attnexp"
    bad = package / "models" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "import pytorch_lightning\n"
        "from ..runner import train\n"
        "def f():\n"
        "    from attnexp.cli.train import cli\n"
    )
    every = {target for _, target in imports(bad, package=package)}
    assert every == {"pytorch_lightning", "attnexp.runner", "attnexp.cli.train"}
    at_import = {target for _, target in imports(bad, top_level_only=True, package=package)}
    assert at_import == {"pytorch_lightning", "attnexp.runner"}
    assert all(RANK[part_of(t)] > RANK["models"] for t in every - FRAMEWORKS)
