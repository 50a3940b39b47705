"""The JAX APIs the suite itself uses that moved between 0.4.35 and 0.10.x: the one place for them.

* ``CompileCounter``: counts XLA backend compilations through JAX's monitoring events
  (``/jax/core/compile/backend_compile_duration``, emitted by every version we support);
  listeners are unregistered by whichever name the version has.
* ``live_array_count()``: ``len(jax.live_arrays())``.
"""

from __future__ import annotations

import threading
from typing import Any

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    """Counts backend compilations while active, on this thread only:

        with CompileCounter() as counter:
            fn(x)
        counter.count, counter.names

    Other threads (e.g. a background compile of an unrelated function) are ignored so
    that only the calls inside the block are charged.
    """

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []
        self._thread = threading.get_ident()

    def _listener(self, event: str, duration: float, *args: Any, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT and threading.get_ident() == self._thread:
            self.count += 1
            self.names.append(str(kwargs.get("fun_name", "?")))

    def __enter__(self) -> CompileCounter:
        from jax import monitoring

        self._thread = threading.get_ident()
        monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        _unregister_duration_listener(self._listener)


def _unregister_duration_listener(callback: Any) -> None:
    from jax import monitoring
    from jax._src import monitoring as src_monitoring

    for module, name in (
        (monitoring, "unregister_event_duration_listener"),
        (src_monitoring, "unregister_event_duration_listener"),
        (src_monitoring, "_unregister_event_duration_listener_by_callback"),
    ):
        remove = getattr(module, name, None)
        if remove is not None:
            remove(callback)
            return
    listeners = getattr(src_monitoring, "_event_duration_secs_listeners", None)
    if listeners is not None and callback in listeners:
        listeners.remove(callback)


def live_array_count() -> int:
    """Number of live JAX arrays on every device (a leak of device buffers grows it)."""
    import jax

    return len(jax.live_arrays())
