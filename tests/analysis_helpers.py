"""The scripts of docs/analysis/, loaded as modules for their tests (they are not in the package)."""

import importlib.util
from pathlib import Path
from types import ModuleType

ANALYSIS_DIR = Path(__file__).parents[1] / "docs" / "analysis"


def load_analysis(name: str) -> ModuleType:
    """docs/analysis/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ANALYSIS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
