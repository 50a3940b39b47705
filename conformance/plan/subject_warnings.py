"""Warnings a subject raises while the suite calls it: captured, passed on, kept one line each.

A subject's deprecation (its module telling users to move elsewhere) is a fact about it a report
should carry, yet pytest's warnings summary is lost with the terminal and names no subject. So
every call the suite makes of an adapter (``availability()`` and ``capabilities()`` when the
subject is resolved, which is where an adapter imports its module; each ``forward`` and
``gradients`` call) runs inside ``capturing``, and what it caught is recorded with the subject
(``Subject.warnings``, ``summary.json``) and with each check's record (``availability.warnings``).

Every occurrence is caught (filter ``always``): Python's default filters would show a
DeprecationWarning from a library only once, or never. Each caught warning is then issued again
as it came, so pytest's summary and the run's ``-W`` filters still see it (an ``error`` filter
still turns it into an exception of the call).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator


def line(warning: warnings.WarningMessage) -> str:
    """``"DeprecationWarning: <message on one line>"``: the category and message, its identity."""
    return f"{warning.category.__name__}: {' '.join(str(warning.message).split())}"


def distinct(lines: Iterable[str]) -> tuple[str, ...]:
    """Each line once, in the order first seen."""
    return tuple(dict.fromkeys(lines))


@contextlib.contextmanager
def capturing(into: list[str]) -> Iterator[None]:
    """Append to ``into`` each distinct warning raised inside (``line``), then issue them again
    (``warnings.warn_explicit``, same category, message and place) for whoever listens outside;
    not after an exception, which an ``error`` filter's re-issue would otherwise hide."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            into.extend(w for w in distinct(map(line, caught)) if w not in into)
    seen: set[str] = set()
    for warning in caught:
        if line(warning) not in seen:
            seen.add(line(warning))
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno, source=warning.source
            )
