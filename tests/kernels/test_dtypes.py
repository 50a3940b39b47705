"""One dtype list: kernels, conformance and reports read the same object."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import conformance.judge.dtypes
import kernels.contract.base
import kernels.contract.dtypes
import reports.run_report.grid

ROOT = Path(__file__).resolve().parents[2]


def test_the_dtype_list_is_one_object() -> None:
    assert (
        reports.run_report.grid.DTYPES is kernels.contract.base.DTYPES is conformance.judge.dtypes.DTYPE_NAMES
    )
    assert kernels.contract.base.DTYPES is kernels.contract.dtypes.DTYPES


def test_the_dtype_list_needs_no_numpy() -> None:
    """reports.run_report.grid is on the gate's import path, which runs with no installs."""
    code = (
        "import sys; import kernels.contract.dtypes, reports.run_report.grid; "
        "heavy = sorted(m for m in ('numpy', 'jax', 'ml_dtypes', 'packaging') if m in sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
