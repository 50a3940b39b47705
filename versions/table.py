"""THE table of versioned libraries: each library's releases, the Python each release needs, the
other libraries it requires, the pins it needs, the subset the matrix runs and its folder token.

A run is keyed by an ordered tuple of ``(library, version)``, in ``LIBRARIES`` order: the primary
library (jax) always, a companion (tokamax) when it is installed. Everything that names a run
(nox's parameters and their Python, report folders, ledger ranges, matrix columns, the gate's
"which library changed", bisection's ``--library``) iterates this table, so a new library axis,
or a new Python for some releases, is one ``Library`` row (plus its pyproject dependency group).

Data only, standard library only: the gate and the noxfile import it with no site-packages.
Release numbers here are plain ``N.N[.N[.N]]``; ``release_number`` orders them.
"""

from __future__ import annotations

import dataclasses
import re

_RELEASE = re.compile(r"^\d+(\.\d+){1,3}$")


def release_number(version: str) -> tuple[int, ...]:
    """``"0.12.0.1"`` -> ``(0, 12, 0, 1)``; the leading release digits of anything else (``0.7.0rc1`` ->
    ``(0, 7, 0)``), which is enough to pick a table row. Raises ValueError on no digits at all."""
    digits = re.match(r"^\d+(?:\.\d+)*", version)
    if digits is None:
        raise ValueError(f"{version!r} is not a release number; write one like 0.10.2")
    return tuple(int(part) for part in digits.group(0).split("."))


def is_release(version: str) -> bool:
    """A final release number (no rc, dev, post or local label)."""
    return bool(_RELEASE.match(version))


@dataclasses.dataclass(frozen=True)
class Release:
    """One release of a library: the oldest release of each other library it installs with (its
    package metadata) and what it changed that matters here."""

    version: str
    needs: tuple[tuple[str, str], ...] = ()  # (library, oldest release), e.g. (("jax", "0.11.0"),)
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Pins:
    """Requirements that the releases ``first`` to ``last`` (inclusive) need beyond pyproject.toml."""

    first: str
    last: str
    requirements: tuple[str, ...]
    why: str


@dataclasses.dataclass(frozen=True)
class Library:
    """One versioned library of the table.

    releases: every release the table knows, oldest first (older ones still install when named).
    matrix: the releases the matrix runs, oldest first; the last is the newest covered, what a
        bare session installs (a primary library) or the default companion (the others).
    pythons: ``(first release, Python)`` rows, oldest first: from that release on, the Python it
        needs (its ``Requires-Python`` floor that this machine kind can offer).
    pins: extra requirements by release range; the first row holding a release applies.
    always: requirements every release of it gets.
    primary: every run has it (jax); a companion (tokamax) is optional and names its folder token.
    group: the pyproject dependency group that pins the companion's newest release.
    """

    name: str
    distribution: str
    releases: tuple[Release, ...]
    matrix: tuple[str, ...]
    pythons: tuple[tuple[str, str], ...]
    pins: tuple[Pins, ...] = ()
    always: tuple[str, ...] = ()
    primary: bool = False
    group: str | None = None

    @property
    def folder_token(self) -> str:
        """The token before its version in a report folder name: ``jax-0.12.0.1-tokamax-0.0.17``."""
        return self.name

    @property
    def newest(self) -> str:
        return self.matrix[-1]

    def release(self, version: str) -> Release | None:
        return next((r for r in self.releases if r.version == version), None)

    def python_for(self, version: str) -> str:
        """The Python one release needs: the last ``pythons`` row at or before it (the first row's
        for anything older)."""
        key = release_number(version)
        chosen = self.pythons[0][1]
        for first, python in self.pythons:
            if key >= release_number(first):
                chosen = python
        return chosen


JAX = Library(
    name="jax",
    distribution="jax",
    # The releases this suite has run, oldest first; others install when named.
    releases=tuple(
        Release(v)
        for v in (
            "0.4.35",
            "0.4.36",
            "0.4.37",
            "0.4.38",
            "0.5.0",
            "0.5.1",
            "0.5.2",
            "0.5.3",
            "0.6.0",
            "0.6.1",
            "0.6.2",
            "0.7.0",
            "0.7.1",
            "0.7.2",
            "0.8.0",
            "0.8.1",
            "0.8.2",
            "0.8.3",
            "0.9.0",
            "0.9.0.1",
            "0.9.1",
            "0.9.2",
            "0.10.0",
            "0.10.1",
            "0.10.2",
            "0.11.0",
            "0.11.1",
            "0.11.2",
            "0.12.0",
            "0.12.0.1",
        )
    ),  # fmt: skip
    # The newest release of each minor line (0.4.35: the oldest the suite supports).
    matrix=(
        "0.4.35",
        "0.4.38",
        "0.5.3",
        "0.6.2",
        "0.7.2",
        "0.8.3",
        "0.9.2",
        "0.10.2",
        "0.11.2",
        "0.12.0.1",
    ),  # fmt: skip
    # jax/jaxlib 0.11.0 on declare Requires-Python >= 3.12; older ones take 3.11.
    pythons=(("0.4.0", "3.11"), ("0.11.0", "3.12")),
    # `jaxlib` is never pinned: every jax release requires `jaxlib<=its own version`, so the resolver
    # picks the right one even for 0.4.37 and 0.5.2, which have no jaxlib of the same number.
    pins=(
        Pins(
            "0.4.31",
            "999",
            ("numpy>=1.26,<3", "ml_dtypes>=0.4", "scipy>=1.10"),
            "checked here: 0.4.35 to 0.12.0.1 run Pallas with numpy 2.4/2.5, ml_dtypes 0.7, scipy 1.17/1.18",
        ),
        Pins(
            "0.4.0",
            "0.4.30",
            ("numpy>=1.24,<2", "ml_dtypes>=0.2,<0.5", "scipy>=1.10,<1.15"),
            "jaxlib before 0.4.31 is built against NumPy 1.x (jax <= 0.4.23 breaks on numpy 2)",
        ),
    ),
    always=("absl-py>=1",),  # Pallas imports absl on several versions without declaring it
    primary=True,
)

TOKAMAX = Library(
    name="tokamax",
    distribution="tokamax",
    # Every release the package index offers (its metadata's jax floor; none has an upper bound).
    releases=(
        Release(
            "0.0.1", (("jax", "0.7.2"),), "pulls tensorflow, torch_xla, jax-triton and the cuda12/tpu extras"
        ),
        Release("0.0.2", (("jax", "0.7.2"),), "pulls tensorflow, jax-triton and the cuda12/tpu extras"),
        Release("0.0.3", (("jax", "0.8.0"),), "pulls tensorflow"),
        Release("0.0.4", (("jax", "0.8.0"),), "pulls tensorflow"),
        Release("0.0.5", (("jax", "0.8.0"),), "pulls tensorflow and qwix"),
        Release("0.0.6", (("jax", "0.8.0"),), "pulls tensorflow and qwix"),
        Release("0.0.7", (("jax", "0.8.1"),), "pulls tensorflow; qwix QArray"),
        Release("0.0.8", (("jax", "0.8.1"),), "pulls tensorflow"),
        Release("0.0.9", (("jax", "0.8.2"),), "pulls tensorflow; module renames (pallas_triton.py)"),
        Release("0.0.10", (("jax", "0.8.2"),), "Mosaic TPU attention registered; tensorflow dropped"),
        Release(
            "0.0.11", (("jax", "0.9.1"),), "TPU backward in its own module, with layout and scheduler fields"
        ),
        Release("0.0.12", (("jax", "0.9.2"),)),
        Release(
            "0.0.13", (("jax", "0.11.0"),), "implementation= takes a string or a sequence, not a bare op"
        ),
        Release("0.0.14", (("jax", "0.11.0"),), "splash attention gains dropout"),
        Release("0.0.15", (("jax", "0.10.2"),), "splash attention's internal api.py"),
        Release("0.0.16", (("jax", "0.11.0"),), "a Mosaic GPU sm80 kernel"),
        Release(
            "0.0.17", (("jax", "0.11.1"),), "local_window_size through CausalMask; public splash attention"
        ),
    ),  # fmt: skip
    # kernels/adapters/tokamax.py reads 0.0.10 on (Mosaic TPU attention); the newest is the pyproject pin.
    matrix=("0.0.10", "0.0.11", "0.0.12", "0.0.13", "0.0.14", "0.0.15", "0.0.16", "0.0.17"),
    pythons=(("0.0.1", "3.11"), ("0.0.13", "3.12")),  # 0.0.13 on: Requires-Python >= 3.12
    group="tokamax",
)

# Primary first, then companions in folder-name order.
LIBRARIES: tuple[Library, ...] = (JAX, TOKAMAX)
PRIMARY: Library = next(library for library in LIBRARIES if library.primary)
COMPANIONS: tuple[Library, ...] = tuple(library for library in LIBRARIES if not library.primary)


def library(name: str) -> Library:
    """The table's row for ``name``; one line naming the known ones otherwise."""
    found = next((lib for lib in LIBRARIES if lib.name == name), None)
    if found is None:
        raise ValueError(
            f"no library {name!r} in versions/table.py; known: {', '.join(row.name for row in LIBRARIES)}"
        )
    return found
