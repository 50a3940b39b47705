"""The pytest options every conformance run gets unless the user gives their own.

Stdlib only: ``noxfile.py`` imports this before any session has pytest installed.
``python -m conformance`` and ``nox -s conformance`` both call ``isolated_args``, so
the two run the same way:

* ``-n N``: the checks run in N pytest-xdist worker processes, one per usable core (at most
  ``MAX_WORKERS``), each reused until it dies; a subject that crashes one costs one case
  (``conformance/harness/isolation.py``). Consecutive items (a case's checks, and the cases
  that share a compiled kernel) go to one worker in chunks, so the split costs little
  duplicated compilation: on 2 cores the main job runs in 0.68x the time of ``-n 1``
  (docs/performance.md).
* ``--max-worker-restart``: how many dead workers xdist replaces before it gives up.
  Each crashing case costs one (a crash is retried once, alone, outside xdist), so this bounds a
  subject that crashes everywhere, not a healthy run.
* ``--timeout``: pytest-timeout's per-test limit, sized to the profile (a thorough
  run shrinks failures for longer inside one test).

Pass ``-n 0`` (or ``-p no:xdist``) to run everything in one process instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

WORKER_RESTARTS = 200
# Each worker holds its own JAX and compiled kernels (about 1 GiB interpreted): beyond 8 the
# memory grows faster than the run shrinks.
MAX_WORKERS = 8
TIMEOUT_S = {"ci": 600, "dev": 900, "thorough": 3600}


def _given(args: Sequence[str], *names: str) -> bool:
    """Whether any of ``names`` appears, as ``--opt``, ``--opt=x`` or ``-nX``."""
    for arg in args:
        for name in names:
            if arg == name or arg.startswith(name + "=") or (len(name) == 2 and arg.startswith(name)):
                return True
    return False


def _profile(args: Sequence[str]) -> str:
    for i, arg in enumerate(args):
        if arg == "--profile" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--profile="):
            return arg.partition("=")[2]
    return "ci"


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_workers() -> int:
    return max(1, min(usable_cores(), MAX_WORKERS))


def isolated_args(args: Sequence[str]) -> list[str]:
    """``args`` plus the isolation defaults the user did not set themselves."""
    args = list(args)
    extra: list[str] = []
    no_xdist = any(a == "no:xdist" or a == "-pno:xdist" for a in args)
    if not no_xdist and not _given(args, "-n", "--numprocesses", "--dist", "-d", "--tx"):
        extra += ["-n", str(default_workers())]
    if not no_xdist and not _given(args, "--max-worker-restart", "--maxworkerrestart"):
        extra += ["--max-worker-restart", str(WORKER_RESTARTS)]
    if not _given(args, "--timeout"):
        extra += ["--timeout", str(TIMEOUT_S.get(_profile(args), TIMEOUT_S["ci"]))]
    return [*extra, *args]
