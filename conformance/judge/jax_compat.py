"""The JAX APIs the suite itself uses that moved between 0.4.35 and 0.10.x: the one place for them.

* ``CompileCounter``: counts XLA backend compilations through JAX's monitoring events
  (``/jax/core/compile/backend_compile_duration``, emitted by every version we support);
  listeners are unregistered by whichever name the version has.
* ``JaxActivity``: the same events plus JAX's traces (``/jax/core/compile/jaxpr_trace_duration``),
  with ``clear_caches()`` (``jax.clear_caches``): whether a call runs through JAX at all.
* ``live_array_count()``: ``len(jax.live_arrays())``.
* ``enable_compilation_cache(folder)``: JAX's persistent compilation cache in ``folder``,
  with the thresholds lowered so that every compilation is kept. The names exist, and CPU
  is among the cache's platforms, in every version from 0.4.35 to 0.10.2 (checked in
  each); a name a future version drops is skipped and reported, not fatal.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path
from typing import Any

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
# Emitted whenever JAX traces a function to a jaxpr, even when the persistent compilation cache
# then spares the backend compile: what says "this call ran through JAX" after clear_caches().
JAXPR_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"

# JAX config -> value for the persistent cache. JAX's defaults keep only compilations
# that took >= 1 s; the suite compiles hundreds of small kernels of 0.1-1 s each
# (interpret-mode Pallas included), so both thresholds go to "keep everything".
# min_entry_size: -1 disables the size limit (0 would let JAX pick one per filesystem).
CACHE_THRESHOLDS: tuple[tuple[str, object], ...] = (
    ("jax_persistent_cache_min_compile_time_secs", 0.0),
    ("jax_persistent_cache_min_entry_size_bytes", -1),
)
# The module that runs host callbacks (io_callback, pure_callback) for every version we support.
HOST_CALLBACK_MODULE = ("jax", "_src", "callback.py")
CACHE_DIR_OPTION = "jax_compilation_cache_dir"
CACHE_ENABLE_OPTION = "jax_enable_compilation_cache"


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
        self.host_callback_names: list[str] = []  # compiles from inside a host callback: not counted
        self._thread = threading.get_ident()

    def _listener(self, event: str, duration: float, *args: Any, **kwargs: Any) -> None:
        if event != BACKEND_COMPILE_EVENT or threading.get_ident() != self._thread:
            return
        if inside_host_callback():
            # TPU interpret mode runs a kernel's memory ops as host callbacks, on whichever
            # thread the runtime picks: the calling one under its interpret-mode config, or a
            # pool thread without it. Those are two cache keys for one op, so its first run on
            # the calling thread compiles even on a second same-shape call (jit(unstack), a
            # race-free control, once in a loaded CI run). That is the interpreter's host side,
            # not the subject's program.
            self.host_callback_names.append(str(kwargs.get("fun_name", "?")))
            return
        self.count += 1
        self.names.append(str(kwargs.get("fun_name", "?")))

    def __enter__(self) -> CompileCounter:
        from jax import monitoring

        self._thread = threading.get_ident()
        monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        _unregister_duration_listener(self._listener)


def inside_host_callback() -> bool:
    """Whether the running code was called from a JAX host callback (io_callback, pure_callback)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith("/".join(HOST_CALLBACK_MODULE)):
            return True
        frame = frame.f_back
    return False


class JaxActivity(CompileCounter):
    """Counts JAX traces and backend compilations while active, on this thread only: after
    ``clear_caches()``, any call that goes through JAX (jit or op by op) traces at least once."""

    def _listener(self, event: str, duration: float, *args: Any, **kwargs: Any) -> None:
        if event in (BACKEND_COMPILE_EVENT, JAXPR_TRACE_EVENT) and threading.get_ident() == self._thread:
            self.count += 1
            self.names.append(str(kwargs.get("fun_name", event.rsplit("/", 1)[-1])))


def clear_caches() -> None:
    """``jax.clear_caches()``: every jit and op-by-op cache of this process, so the next call of
    anything JAX traces (and compiles, or reads the persistent cache) again."""
    import jax

    jax.clear_caches()


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


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """What ``enable_compilation_cache`` did: the folder, the config names it set, and
    those this JAX version does not have (a newer or older JAX renamed or lacks them)."""

    folder: Path
    applied: tuple[tuple[str, object], ...]
    missing: tuple[str, ...]


def compilation_cache_settings(folder: Path) -> tuple[tuple[str, object], ...]:
    """The (config name, value) pairs that turn the persistent cache on in ``folder``."""
    return ((CACHE_ENABLE_OPTION, True), (CACHE_DIR_OPTION, str(folder)), *CACHE_THRESHOLDS)


def enable_compilation_cache(folder: Path | str, config: Any = None) -> CacheSettings:
    """Turn on JAX's persistent compilation cache in ``folder`` (created if missing).

    Call it before the first compilation: JAX decides once per process whether the
    cache is used. ``config`` is ``jax.config`` unless given (tests pass a fake).
    """
    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if config is None:
        import jax

        config = jax.config
    applied, missing = [], []
    for name, value in compilation_cache_settings(folder):
        try:
            config.update(name, value)
        except (AttributeError, KeyError):  # the name this version does not know
            missing.append(name)
        else:
            applied.append((name, value))
    return CacheSettings(folder, tuple(applied), tuple(missing))
