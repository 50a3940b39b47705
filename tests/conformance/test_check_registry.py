"""The check registry: each check declared once, and every consumer reading it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args

import pytest

from conformance import test_checks as entry_points
from conformance.judge import standalone
from conformance.judge.repro import script
from conformance.plan import catalogue
from conformance.plan.cases import Case
from conformance.plan.user_cases import USER_CHECKS
from conformance.suite.check_registry import (
    CHECKS,
    LABELS,
    REGISTRY,
    CheckDeclaration,
    Repro,
    Sampling,
    declaration,
    validate,
)
from kernels.registry import resolve
from reports.run_report import grid

ROOT = Path(__file__).resolve().parents[2]


def test_every_declared_check_has_a_function_an_entry_point_a_label_and_a_grid_row():
    for check in REGISTRY:
        assert callable(check.resolve()), check.name
        assert callable(getattr(entry_points, f"test_{check.name}")), check.name
        assert grid.label(check.name) == LABELS[check.name]
    assert [name for name in dir(entry_points) if name.startswith("test_")] == sorted(
        f"test_{c}" for c in CHECKS
    )


def test_user_cases_and_repro_follow_the_declarations():
    assert "leak" not in USER_CHECKS  # one fixed case per subject (its declaration)
    case = Case("xla", "float32")
    assert "attention_backward" in script(case, declaration("backward"), "xla")
    assert "run_check(case, 'finite'" in script(case, declaration("finite"), "xla")


def test_a_bad_declaration_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown needs"):
        CheckDeclaration("x", "m:f", "x", 99, needs=("gpu",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not 'module:function'"):
        CheckDeclaration("x", "m.f", "x", 99)
    with pytest.raises(ValueError, match="unknown sampling 'some_cases'"):
        CheckDeclaration("x", "m:f", "x", 99, sampling="some_cases")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown repro 'forward'"):
        CheckDeclaration("x", "m:f", "x", 99, repro="forward")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate name"):
        validate((*REGISTRY, REGISTRY[0]))
    with pytest.raises(KeyError, match="no check named 'nope'"):
        declaration("nope")


def test_samplings_and_repro_recipes_are_what_the_planner_and_the_scripts_read():
    """The planner narrows cases by the declared sampling alone, and a repro script follows the
    declared recipe alone: a check with a new name but a known sampling and recipe needs no code."""
    assert set(catalogue.SAMPLES) <= set(get_args(Sampling))
    adapter = resolve("xla")
    judged = {"out_tensor": "got.out", "lse_tensor": "got.lse", "gradient_tensors": "attention_backward("}
    for recipe in get_args(Repro):
        check = CheckDeclaration("toy", "m:f", "toy", 99, repro=recipe)
        assert standalone.supports(check, adapter) == (recipe != "suite_only"), recipe
        text = script(Case("xla", "float32"), check, "xla")  # the checkout script, no adapter given
        assert judged.get(recipe, "run_check(case, 'toy'") in text, recipe


def test_the_registry_and_the_report_grid_import_without_numpy_or_jax():
    # The gate runs in a bare venv (nox -s gate): the grid reads the registry there.
    code = (
        "import sys, reports.run_report.grid; print(sorted(m for m in ('numpy', 'jax') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_module_that_misses_a_declared_check_fails_collection(tmp_path):
    """A check whose test went missing would silently drop out of every run: collection fails."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "conformance" / "conftest.py").read_text())
    (suite / "test_partial.py").write_text(
        textwrap.dedent(
            """
            def test_forward(planned, conformance):
                conformance.check(planned)
            """
        )
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        "--impl",
        "tests.support.toy_subjects:exact",
        "--report-dir",
        str(tmp_path / "report"),
        f"--rootdir={ROOT}",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "collect no test" in done.stdout + done.stderr and "'lse'" in done.stdout + done.stderr
