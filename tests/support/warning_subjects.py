"""A correct toy subject that warns the way a deprecated library does: its module on import (as
``jax.experimental.pallas.ops.gpu.attention`` does from JAX 0.11.2) and each call, with a
message repeated word for word, so a run must record each distinct warning once.

Import it only in a subprocess run (``--impl tests.support.warning_subjects:exact_but_warns``):
its import warning fires once per process, and a run must be the first to import it.
"""

from __future__ import annotations

import warnings

from tests.support import toy_subjects

IMPORT_WARNING = "tests.support.warning_subjects is deprecated; use tests.support.toy_subjects instead"
CALL_WARNING = "exact_but_warns: the alignment keyword will change its default"

warnings.warn(IMPORT_WARNING, DeprecationWarning, stacklevel=2)


def exact_but_warns(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """``toy_subjects.exact``, after a FutureWarning (the same one at every call)."""
    warnings.warn(CALL_WARNING, FutureWarning, stacklevel=2)
    return toy_subjects.exact(
        q, k, v, scale=scale, causal=causal, alignment=alignment, q_lengths=q_lengths, kv_lengths=kv_lengths
    )


exact_but_warns.attention_capabilities = toy_subjects.CAPS
