"""The chips a check budgets for, as a user names them (``--tpu v5e,v6e``, ``--gpu h100,a100``)."""

from __future__ import annotations

from collections.abc import Iterable


def parse_target_list(
    text: str, known: Iterable[str], option: str, kind: str, example: str
) -> tuple[str, ...]:
    """``"v5e, V6E,v5e"`` -> ("v5e", "v6e"): lower-cased, in order, once each; a one-line ValueError
    naming the unknown ones and the choices (``kind``: "chip", "GPU"; ``example``: a valid value)."""
    known = tuple(known)
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(
            f"{option} {text!r}: unknown {kind}(s) {unknown or '(none given)'}; choose from "
            f"{', '.join(known)} (comma-separated, e.g. {option} {example})"
        )
    return names
