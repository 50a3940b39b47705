"""What the reliability tests share besides ``tests.support.suite.run_suite``: the faulty
subjects' selection and running another module of this checkout (``python -m reports``)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.suite import ROOT

FAULTY = "tests.faulty.kernels"
# Two float32 cases of the default capabilities: Sq1 is healthy, Sq113 is where tests.faulty misbehaves.
TINY = "full and (Sq1-Sk1-D32 or Sq113-Sk113-D64) and (test_forward or test_shape_dtype or test_finite)"
HEALTHY_CASE = "float32-full-B1-Hq1-Hkv1-Sq1-Sk1-D32"
FAULTY_CASE = "float32-full-B1-Hq1-Hkv1-Sq113-Sk113-D64"


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
