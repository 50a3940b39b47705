"""No code path branches on a check's name: it reads an attribute the check declares in
``conformance/suite/check_registry.py`` (its needs, sampling, repro recipe, ...) instead, so a
new check is one declaration, and a renamed one breaks nothing silently.

The scan reads every source module with ``ast`` and flags, outside the registry:

* a comparison (``==``, ``!=``, ``in``, ``not in``) of a registered check name (or a tuple,
  list or set holding one, literal or bound to a name) with an expression that names a check;
* a ``match`` on such an expression with a check name among its patterns;
* a lookup in a dict keyed by check names (a literal, or a name bound to one) with such an
  expression: ``{...}[check.name]``, ``HELPERS.get(r.check)``;
* a check picked by its name literal: ``declaration("forward")``, ``BY_NAME["forward"]``.

An expression names a check when it is a variable whose name says check (``check``,
``check_name``, ``checks``), an attribute ``.check``, the ``.name`` of such a variable or of
``declaration(...)``, or a variable the same function bound to one of those (``name =
check.name``, ``for name in CHECKS``). A direction, a tensor or a constraint basis that happens
to share a check's name (``direction == "forward"``) is none of these.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from conformance.suite.check_registry import CHECKS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("conformance", "reports", "kernels", "benchmarks", "scripts", "noxfile.py")
REGISTRY_FILE = ROOT / "conformance" / "suite" / "check_registry.py"
CHECK_COLLECTIONS = ("CHECKS", "REGISTRY", "REPORT_ORDER", "BY_NAME", "LABELS", "USER_CHECKS")


@dataclass(frozen=True)
class Branch:
    line: int
    text: str


def _check_names(node: ast.AST | None, names: frozenset[str]) -> set[str]:
    """The check names a literal holds: a string constant, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_check_names(e, names) for e in node.elts))
    return set()


def _is_declaration_call(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (
        isinstance(func, ast.Name | ast.Attribute)
        and (getattr(func, "id", None) or func.attr) == "declaration"
    )


def _names_a_check(node: ast.AST, bound: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return "check" in node.id.lower() or node.id in bound
    if isinstance(node, ast.Attribute):
        if node.attr in ("check", "check_name"):
            return True
        if node.attr == "name":
            return _names_a_check(node.value, bound) or _is_declaration_call(node.value)
    return False


def _bound_to_checks(scope: ast.AST) -> set[str]:
    """Variables of ``scope`` bound to a check or its name (assignment or loop), to a fixpoint."""
    bound: set[str] = set()
    while True:
        found = set(bound)
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _names_a_check(node.value, found):
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.For | ast.comprehension):
                source = ast.unparse(node.iter)
                if any(c in source for c in CHECK_COLLECTIONS) or _names_a_check(node.iter, found):
                    found |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if found == bound:
            return bound
        bound = found


def _bound_to_literals(tree: ast.AST, names: frozenset[str]) -> tuple[set[str], set[str]]:
    """(variables bound to a dict keyed by check names, variables bound to a collection of them)."""
    keyed: set[str] = set()
    listed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            ids = {t.id for t in targets if isinstance(t, ast.Name)}
            if isinstance(node.value, ast.Dict) and any(_check_names(k, names) for k in node.value.keys):
                keyed |= ids
            elif _check_names(node.value, names):
                listed |= ids
    return keyed, listed


def check_name_branches(source: str, names: frozenset[str] = frozenset(CHECKS)) -> list[Branch]:
    """Where ``source`` branches on a check's name (see the module docstring), in line order."""
    tree = ast.parse(source)
    keyed, listed = _bound_to_literals(tree, names)

    def lists_checks(node: ast.AST) -> bool:
        return bool(_check_names(node, names)) or (isinstance(node, ast.Name) and node.id in listed)

    def keyed_by_checks(node: ast.AST) -> bool:
        return (isinstance(node, ast.Dict) and any(_check_names(k, names) for k in node.keys)) or (
            isinstance(node, ast.Name) and node.id in keyed
        )

    found: dict[tuple[int, int], Branch] = {}
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
    for scope in scopes:
        bound = _bound_to_checks(scope)
        for node in ast.walk(scope):
            hit = False
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                hit = any(lists_checks(o) for o in operands) and any(
                    _names_a_check(o, bound) for o in operands
                )
            elif isinstance(node, ast.Match):
                patterns = [p for case in node.cases for p in ast.walk(case.pattern)]
                hit = _names_a_check(node.subject, bound) and any(
                    isinstance(p, ast.MatchValue) and _check_names(p.value, names) for p in patterns
                )
            elif isinstance(node, ast.Subscript):
                hit = (keyed_by_checks(node.value) and _names_a_check(node.slice, bound)) or (
                    isinstance(node.value, ast.Name)
                    and node.value.id == "BY_NAME"
                    and _check_names(node.slice, names)
                )
            elif isinstance(node, ast.Call):
                func = node.func
                first = node.args[0] if node.args else None
                hit = (
                    isinstance(func, ast.Attribute)
                    and func.attr == "get"
                    and keyed_by_checks(func.value)
                    and first is not None
                    and _names_a_check(first, bound)
                ) or (_is_declaration_call(node) and bool(_check_names(first, names)))
            if hit:
                found[(node.lineno, node.col_offset)] = Branch(node.lineno, ast.unparse(node)[:120])
    return [found[key] for key in sorted(found)]


def source_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        path = root / source
        if path.is_file():
            files.append(path)
        else:
            files += sorted(p for p in path.rglob("*") if p.is_file() and _is_python(p))
    return [f for f in files if f != REGISTRY_FILE]


def _is_python(path: Path) -> bool:
    """A module, or an executable Python script without the suffix (scripts/device-bench)."""
    if path.suffix == ".py":
        return True
    first = path.read_bytes().split(b"\n", 1)[0]
    return path.suffix == "" and first.startswith(b"#!") and b"python" in first


def test_no_code_path_branches_on_a_check_name():
    assert len(CHECKS) > 10  # the names the scan looks for
    found = [
        f"{path.relative_to(ROOT)}:{branch.line}: {branch.text}"
        for path in source_files()
        for branch in check_name_branches(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "code that branches on a check's name; declare the difference as an attribute of the "
        "check (conformance/suite/check_registry.py) and read that instead:\n" + "\n".join(found)
    )


def test_the_scan_covers_the_scripts_and_the_suite():
    scanned = {str(p.relative_to(ROOT)) for p in source_files()}
    assert {
        "scripts/device-bench",
        "conformance/judge/standalone.py",
        "conformance/plan/catalogue.py",
    } <= scanned
    assert "conformance/suite/check_registry.py" not in scanned


PLANTED = {
    "compare the name": 'def f(check):\n    if check.name == "finite":\n        return 1\n',
    "compare a record's check": 'def f(records):\n    return [r for r in records if r.check != "raises"]\n',
    "membership of the name": 'def f(check):\n    return check.name in ("finite", "shape_dtype")\n',
    "membership in a named tuple": 'NUMERIC = ("lse",)\n\ndef f(check):\n    return check.name in NUMERIC\n',
    "a literal in the checks": 'def f(checks):\n    return "leak" in checks\n',
    "through a variable": 'def f(check):\n    name = check.name\n    return name == "lse"\n',
    "a loop over the checks": 'def f():\n    for c in CHECKS:\n        if c == "races":\n            pass\n',
    "match": 'def f(check):\n    match check.name:\n        case "vmem":\n            return 1\n',
    "dict literal lookup": 'def f(check):\n    return {"finite": 1, "lse": 2}.get(check.name, 0)\n',
    "named dict lookup": 'HELPERS = {"finite": 1}\n\ndef f(check):\n    return HELPERS[check.name]\n',
    "declaration by literal": 'def f():\n    return declaration("forward").needs\n',
    "BY_NAME by literal": 'def f():\n    return BY_NAME["forward"]\n',
    "declaration's name": 'def f(x):\n    return declaration(x).name == "backward"\n',
}


def test_the_scan_reports_each_planted_branch():
    for what, source in PLANTED.items():
        assert check_name_branches(source), f"the scan misses {what}: {source!r}"


def test_the_scan_leaves_homonyms_and_declared_attributes_alone():
    clean = (
        "def f(direction, check, names, constraint):\n"
        '    a = direction == "forward"\n'
        '    b = check.repro == "out_tensor" and check.sampling == "one_case"\n'
        '    c = [n for n in names if n == "lse"]  # tensors, not checks\n'
        '    d = constraint.basis == "raises"\n'
        "    e = declaration(check.name).needs\n"
        "    return a, b, c, d, e\n"
    )
    assert check_name_branches(clean) == []
