"""Root conftest: make sure the project's own top-level packages are the ones imported.

PyPI has a package called ``kernels`` (and could have others named like ours). If
one is installed and wins the import, every test would silently exercise foreign
code, so we fail fast with the fix instead.
"""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROJECT_PACKAGES = ("versions", "reference", "kernels", "run_records", "conformance", "reports", "benchmarks")


def assert_project_packages(root: Path = ROOT) -> None:
    for name in PROJECT_PACKAGES:
        module = importlib.import_module(name)
        origin = Path(getattr(module, "__file__", "") or "").resolve()
        if root not in origin.parents:
            raise ImportError(
                f"package {name!r} was imported from {origin}, not from this checkout {root}; "
                f"uninstall the other {name!r} or run from the repository root"
            )


assert_project_packages()
