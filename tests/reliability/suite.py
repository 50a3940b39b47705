"""Runs the real suite in a subprocess, the way a user does (``python -m conformance``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAULTY = "tests.faulty.kernels"
# Two float32 cases of the default capabilities: Sq1 is healthy, Sq113 is where tests.faulty misbehaves.
TINY = "full and (Sq1-Sk1-D32 or Sq113-Sk113-D64) and (test_forward or test_shape_dtype or test_finite)"
HEALTHY_CASE = "float32-full-B1-Hq1-Hkv1-Sq1-Sk1-D32"
FAULTY_CASE = "float32-full-B1-Hq1-Hkv1-Sq113-Sk113-D64"


def suite_command(report_dir: Path, impl: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "conformance",
        "--impl",
        impl,
        "--report-dir",
        str(report_dir),
        "--no-shrink",
        "-q",
        *args,
    ]


def run_suite(
    report_dir: Path, impl: str, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        suite_command(report_dir, impl, *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
