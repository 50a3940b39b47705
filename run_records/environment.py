"""The environment block of ``summary.json``: library versions and hardware only.

Never environment-variable values, user names or paths under the home folder:
reports get pasted into public code reviews.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

from versions import table

# The companions of the version table (tokamax): a run is keyed by (jax, *companions). The environment
# block names each one's version explicitly, None when it is not installed, so a folder says "no
# tokamax" rather than leaving the reader to infer it from a missing key.
COMPANIONS: tuple[str, ...] = tuple(library.distribution for library in table.COMPANIONS)
LIBRARIES = ("jax", "jaxlib", *COMPANIONS, "numpy", "ml_dtypes", "scipy", "hypothesis", "pytest", "torch")


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_revision(root: Path | None = None) -> str:
    root = root or Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if done.returncode != 0:
        return "unknown"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return done.stdout.strip() + ("-dirty" if dirty else "")


def backend() -> dict[str, str]:
    """JAX's default backend and device kind, without failing when JAX is absent."""
    try:
        import jax

        device = jax.devices()[0]
        return {
            "backend": jax.default_backend(),
            "device_kind": str(device.device_kind),
            "device_count": str(jax.device_count()),
        }
    except Exception as exc:  # noqa: BLE001 - an environment report must never crash the run
        return {"backend": "unavailable", "device_kind": f"({type(exc).__name__})"}


def environment_block() -> dict[str, Any]:
    libraries = library_versions()
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "processor": platform.processor() or platform.machine(),
        "libraries": libraries,
        **{name: libraries.get(name) for name in COMPANIONS},
        **backend(),
        "git_revision": git_revision(),
    }


def one_line(env: dict[str, Any]) -> str:
    """The environment in one line, for the top of report.md."""
    libs = env.get("libraries", {})
    parts = [f"Python {env.get('python', '?')}"]
    parts += [
        f"{name} {libs[name]}" for name in ("jax", "jaxlib", *COMPANIONS, "numpy", "torch") if name in libs
    ]
    parts.append(f"{env.get('backend', '?')} ({env.get('device_kind', '?')})")
    parts.append(f"rev {env.get('git_revision', '?')}")
    return " · ".join(parts)
