"""Which JAX versions ``nox -s bench`` runs: the rules of ``reports.jax_versions``, applied to ``bench``.

``reports.jax_versions.session_versions`` reads the ``conformance`` selectors on nox's
command line (a bare name means the newest version; ``(jax='X')`` adds X, listed or
not; no selector keeps the whole matrix). ``bench`` follows the same rules with its
own selectors, so ``nox -s "bench(jax='0.4.38')"`` works for any release and a plain
``nox -s bench`` benchmarks the newest one. Pure and stdlib-only: the noxfile imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from reports import jax_versions

SESSION = "bench"
_BENCH_SELECTOR = re.compile(rf"^\s*{SESSION}(?=$|\s|\(|-)")


def bench_versions(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The parameter list for the ``bench`` session; argv: nox's arguments without the program name."""
    selectors = jax_versions.requested_selectors(argv, environ)
    # Each bench selector, renamed to the conformance session, is read by the one set of rules.
    renamed = [
        _BENCH_SELECTOR.sub(jax_versions.SESSION, s, count=1) for s in selectors if _BENCH_SELECTOR.match(s)
    ]
    return jax_versions.session_versions(["--sessions", *renamed], {})
