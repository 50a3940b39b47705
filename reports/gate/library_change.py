"""Which library an upgrade changes, jax, tokamax or both: the gate compares any two (jax, tokamax)
folders, and a regression means something different when only the kernel library moved.

Pure: reads the versions each ``Run`` recorded (``Run.jax_version``, ``Run.tokamax_version``; None
when tokamax was not installed, so "not installed -> 0.0.12" is a tokamax change too).
"""

from __future__ import annotations

import dataclasses

from reports.records.run_folder import Run

LIBRARIES = ("jax", "tokamax")


@dataclasses.dataclass(frozen=True)
class LibraryChange:
    """The versions of each library on both sides, ``(base, candidate)``; None: not installed."""

    jax: tuple[str, str]
    tokamax: tuple[str | None, str | None]

    @property
    def changed(self) -> tuple[str, ...]:
        """The libraries whose version differs, in ``LIBRARIES`` order: ``()`` when neither does."""
        return tuple(name for name in LIBRARIES if len(set(getattr(self, name))) == 2)

    def words(self) -> str:
        """``jax changed``, ``tokamax changed``, ``jax and tokamax changed`` or ``no library changed``."""
        if not self.changed:
            return "no library changed"
        return f"{' and '.join(self.changed)} changed"

    def line(self) -> str:
        """Both libraries, base to candidate, for the gate's Markdown:
        ``jax 0.9.2 → 0.10.2 · tokamax 0.0.11 → 0.0.12 (jax and tokamax changed)``."""
        parts = []
        for name in LIBRARIES:
            base, candidate = (_word(v) for v in getattr(self, name))
            parts.append(
                f"{name} {base} → {candidate}" if base != candidate else f"{name} {base} (unchanged)"
            )
        return f"{' · '.join(parts)} ({self.words()})"


def _word(version: str | None) -> str:
    return "not installed" if version is None else version


def library_change(base: Run, candidate: Run) -> LibraryChange:
    """What moved between the two runs' recorded library versions."""
    return LibraryChange(
        jax=(base.jax_version, candidate.jax_version),
        tokamax=(base.tokamax_version, candidate.tokamax_version),
    )
