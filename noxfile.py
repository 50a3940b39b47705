"""nox sessions: one per job, one environment per JAX version.

    nox -s tests                          # the project's own tests (newest JAX)
    nox -s conformance                    # the conformance suite at the newest JAX
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
NEWEST_JAX = "0.10.2"


def install_project(
    session: nox.Session, jax_version: str = NEWEST_JAX, groups: tuple[str, ...] = ("test",)
) -> None:
    """Install the project's dependencies (not the project: it runs from the checkout)."""
    requirements = [r for r in PYPROJECT["project"]["dependencies"] if not r.startswith("jax")]
    for group in groups:
        requirements += nox.project.dependency_groups(PYPROJECT, group)
    session.install(*requirements, f"jax=={jax_version}", f"jaxlib=={jax_version}")


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The project's own tests: reference, adapters, checks, mutants, reports."""
    install_project(session)
    session.run("pytest", *session.posargs)


@nox.session(python="3.11")
def conformance(session: nox.Session) -> None:
    """The conformance suite (until it lands: the reference demo)."""
    install_project(session)
    session.run("python", "-m", "reference", *session.posargs)
