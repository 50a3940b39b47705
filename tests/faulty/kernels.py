"""Plug-in functions (``--impl tests.faulty.kernels:<name>``) that fail in one way each.

Every one is the float64 reference on most cases and misbehaves only when the query
length is ``TRIGGER_LEN``, so one run holds both the fault and healthy cases whose
results must all still be there:

``segfault``     dereferences NULL (SIGSEGV)         ``abort``        calls os.abort() (SIGABRT)
``hang``         blocks forever inside a C call that holds the GIL (a deadlocked kernel)
``hog``          allocates (and touches) memory until the worker's limit stops it
``oom_killed``   dies of SIGKILL, leaving no last words (the kernel's OOM killer)
``raises``       raises RuntimeError                 ``wrong_shape``  drops the last query row
``wrong_type``   returns a string                    ``healthy``      never misbehaves
``crash_once``   calls os.abort() on the first trigger call ever (as XLA:CPU's compiler sometimes
                 does in a long run), then never again: its marker file is in $CRASH_ONCE_DIR
"""

from __future__ import annotations

import ctypes
import os
import signal

import numpy as np

from reference import AttentionInputs, AttentionSpec, attention_forward

TRIGGER_LEN = 113  # ci cases with Sq 113 exist for the default (float32, no mask) capabilities
CRASH_ONCE_DIR = "CRASH_ONCE_DIR"  # environment variable: a folder the run's processes share


def _reference(q, k, v, scale):
    out = attention_forward(AttentionInputs(q=q, k=k, v=v), AttentionSpec(scale=scale)).out
    return out.astype(q.dtype)


def _triggered(q) -> bool:
    return q.shape[2] == TRIGGER_LEN


def healthy(q, k, v, *, scale):
    """float64 attention, rounded to the input dtype."""
    return _reference(q, k, v, scale)


def segfault(q, k, v, *, scale):
    """Reads address 0 on the trigger length."""
    if _triggered(q):
        ctypes.string_at(0)
    return _reference(q, k, v, scale)


def abort(q, k, v, *, scale):
    """os.abort() on the trigger length."""
    if _triggered(q):
        os.abort()
    return _reference(q, k, v, scale)


def hang(q, k, v, *, scale):
    """Locks a plain pthread mutex twice through PyDLL (which keeps the GIL): no signal,
    no Python thread can end it; only a watchdog outside the interpreter can."""
    if _triggered(q):
        libc = ctypes.PyDLL(None)
        mutex = ctypes.create_string_buffer(64)  # zeroed = PTHREAD_MUTEX_INITIALIZER on glibc
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)
    return _reference(q, k, v, scale)


def hog(q, k, v, *, scale):
    """Keeps 256 MiB blocks until allocation fails. Untouched (np.empty): the worker's limit
    counts what is mapped, and writing gigabytes on a loaded 2-core machine takes seconds each."""
    if _triggered(q):
        blocks = []
        while True:
            blocks.append(np.empty(1 << 25))
    return _reference(q, k, v, scale)


def oom_killed(q, k, v, *, scale):
    """Dies of SIGKILL on the trigger length, as under the kernel's out-of-memory killer."""
    if _triggered(q):
        os.kill(os.getpid(), signal.SIGKILL)
    return _reference(q, k, v, scale)


def raises(q, k, v, *, scale):
    """Raises on the trigger length."""
    if _triggered(q):
        raise RuntimeError("kernel launch failed: invalid configuration argument")
    return _reference(q, k, v, scale)


def wrong_shape(q, k, v, *, scale):
    """Drops the last query row on the trigger length."""
    out = _reference(q, k, v, scale)
    return out[:, :, :-1] if _triggered(q) else out


def wrong_type(q, k, v, *, scale):
    """Returns a string on the trigger length."""
    return "not an array" if _triggered(q) else _reference(q, k, v, scale)


def crash_once(q, k, v, *, scale):
    """os.abort() on the first trigger call of all processes sharing $CRASH_ONCE_DIR; reference after."""
    if _triggered(q):
        folder = os.environ.get(CRASH_ONCE_DIR)
        if not folder:
            raise RuntimeError(f"crash_once needs ${CRASH_ONCE_DIR}: set it to an empty folder")
        try:  # O_EXCL: exactly one call, in whichever process, creates the marker and crashes
            os.close(os.open(os.path.join(folder, "crashed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return _reference(q, k, v, scale)
        os.abort()
    return _reference(q, k, v, scale)
