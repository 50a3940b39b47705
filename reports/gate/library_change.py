"""Which library an upgrade changes, jax, tokamax or both: the gate compares any two (jax, tokamax)
folders, and a regression means something different when only the kernel library moved.

Pure: reads the versions each ``Run`` recorded (``Run.jax_version``, ``Run.tokamax_version``; None
when tokamax was not installed, so "not installed -> 0.0.12" is a tokamax change too).
"""

from __future__ import annotations

import dataclasses

from run_records.run_folder import Run
from versions import table

LIBRARIES = tuple(library.name for library in table.LIBRARIES)


@dataclasses.dataclass(frozen=True)
class LibraryChange:
    """Each library of the version table, ``(base, candidate)``; None: not installed."""

    versions: tuple[tuple[str, tuple[str | None, str | None]], ...]

    def of(self, name: str) -> tuple[str | None, str | None]:
        return dict(self.versions)[name]

    @property
    def jax(self) -> tuple[str | None, str | None]:
        return self.of("jax")

    @property
    def tokamax(self) -> tuple[str | None, str | None]:
        return self.of("tokamax")

    @property
    def changed(self) -> tuple[str, ...]:
        """The libraries whose version differs, in table order: ``()`` when none does."""
        return tuple(name for name, pair in self.versions if len(set(pair)) == 2)

    def words(self) -> str:
        """``jax changed``, ``tokamax changed``, ``jax and tokamax changed`` or ``no library changed``."""
        if not self.changed:
            return "no library changed"
        return f"{' and '.join(self.changed)} changed"

    def line(self) -> str:
        """Every library, base to candidate, for the gate's Markdown:
        ``jax 0.10.2 → 0.12.0.1 · tokamax 0.0.12 → 0.0.17 (jax and tokamax changed)``."""
        parts = []
        for name, pair in self.versions:
            base, candidate = (_word(v) for v in pair)
            parts.append(
                f"{name} {base} → {candidate}" if base != candidate else f"{name} {base} (unchanged)"
            )
        return f"{' · '.join(parts)} ({self.words()})"


def _word(version: str | None) -> str:
    return "not installed" if version is None else version


def library_change(base: Run, candidate: Run) -> LibraryChange:
    """What moved between the two runs' recorded library versions."""
    before, after = base.library_versions, candidate.library_versions
    return LibraryChange(tuple((name, (before[name], after[name])) for name in LIBRARIES))
