"""No module under tests/ imports a test module (a ``test_*.py`` file under tests/): what two
test modules share lives in tests/support/ (or a helper module beside them), so moving or
renaming a test module never breaks another, and pytest never collects a module twice.

Imports are read with ``ast`` at any depth of a file, relative imports are resolved against
their package, and ``from pkg import name`` counts when ``pkg/name.py`` is a test module. The
scan is shown to catch every planted form, so this test cannot pass vacuously. Test file
names are unique across the tree too, so a failure's file name alone says where it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported(node: ast.AST, package: tuple[str, ...]) -> Iterator[str]:
    """The dotted names ``node`` may import: a module, or a module's attribute that may be one."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = list(package[: len(package) - node.level + 1]) if node.level else []
        if node.module:
            base += node.module.split(".")
        yield ".".join(base)
        yield from (".".join([*base, alias.name]) for alias in node.names)


def _test_module_file(root: Path, tests: Path, name: str) -> Path | None:
    """The file of ``name`` when it is a test module under ``tests``, else None."""
    file = (root / name.replace(".", "/")).with_suffix(".py")
    if file.name.startswith("test_") and file.is_file() and file.is_relative_to(tests):
        return file
    return None


def imports_of_test_modules(root: Path = ROOT, folder: str = "tests") -> list[str]:
    """``path:line imports name`` for every import of a test module by a module under ``folder``."""
    tests = root / folder
    found = []
    for file in sorted(tests.rglob("*.py")):
        relative = file.relative_to(root)
        # ``from . import x`` in ``a/b.py`` and in ``a/__init__.py`` is ``a.x``.
        package = relative.parent.parts
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            for name in _imported(node, package):
                if _test_module_file(root, tests, name) is not None:
                    found.append(f"{relative.as_posix()}:{node.lineno} imports {name}")
    return found


def test_no_module_under_tests_imports_a_test_module():
    found = imports_of_test_modules()
    assert not found, "move what they share into tests/support/:\n" + "\n".join(found)


def test_the_scan_reports_each_planted_import(tmp_path):
    (tmp_path / "tests" / "a").mkdir(parents=True)
    (tmp_path / "tests" / "b").mkdir()
    for package in ("tests", "tests/a", "tests/b"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "tests" / "a" / "test_x.py").write_text("HELPER = 1\n")
    (tmp_path / "tests" / "a" / "helpers.py").write_text("HELPER = 1\n")
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "test_entry.py").write_text("")  # a source module named test_*, outside tests/
    (tmp_path / "tests" / "b" / "test_y.py").write_text(
        "from tests.a.test_x import HELPER\n"  # 1
        "import tests.a.test_x\n"  # 2
        "from tests.a import test_x\n"  # 3
        "from tests.a.helpers import HELPER\n"  # allowed: not a test module
        "from tool import test_entry\n"  # allowed: not under tests/
        "def late():\n"
        "    from ..a.test_x import HELPER\n"  # 7: relative, inside a function
        "    from ..a import helpers\n"  # allowed
    )
    (tmp_path / "tests" / "a" / "test_z.py").write_text("from . import test_x\n")  # 1: a sibling
    assert imports_of_test_modules(tmp_path) == [
        "tests/a/test_z.py:1 imports tests.a.test_x",
        "tests/b/test_y.py:1 imports tests.a.test_x",
        "tests/b/test_y.py:2 imports tests.a.test_x",
        "tests/b/test_y.py:3 imports tests.a.test_x",
        "tests/b/test_y.py:7 imports tests.a.test_x",
    ]


def duplicate_test_file_names(root: Path = ROOT, folder: str = "tests") -> dict[str, list[str]]:
    """Test file names used more than once under ``folder``, with their paths."""
    paths: dict[str, list[str]] = {}
    for file in sorted((root / folder).rglob("test_*.py")):
        paths.setdefault(file.name, []).append(file.relative_to(root).as_posix())
    return {name: found for name, found in paths.items() if len(found) > 1}


def test_test_file_names_are_unique_across_the_tree():
    """A failure's file name alone says where the test is."""
    assert not duplicate_test_file_names(), "rename one of each:\n" + str(duplicate_test_file_names())


def test_the_name_scan_reports_a_planted_duplicate(tmp_path):
    for folder in ("tests/a", "tests/b"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test_same.py").write_text("")
    (tmp_path / "tests" / "a" / "test_other.py").write_text("")
    assert duplicate_test_file_names(tmp_path) == {
        "test_same.py": ["tests/a/test_same.py", "tests/b/test_same.py"]
    }
