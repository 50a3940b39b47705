"""How a Pallas TPU kernel runs on this machine, per JAX version: the one place for it.

Three executions exist:

* ``native``  - a TPU is attached: the kernel is compiled by Mosaic as shipped.
* ``generic`` - Pallas's generic interpreter (``pallas_call(..., interpret=True)``):
  the kernel body runs as a jitted scan over the grid on CPU. Fast (a few ms per
  call at S=256 once compiled). Available on every supported JAX version.
* ``tpu``     - TPU interpret mode (``pltpu.force_tpu_interpret_mode(InterpretParams())``):
  also models TPU memory (uninitialised buffers are NaN, DMAs, semaphores), about
  30-50x slower. Only from JAX 0.7.0, where the context manager appeared.

The TPU flash kernel module calls ``pl.pallas_call`` without an ``interpret``
argument, so the generic route needs it forced. We do that without touching JAX:
``interpreted_copy`` executes the kernel module's own source file a second time,
as a private module whose ``pl`` name is a namespace where ``pallas_call`` has
``interpret=True``. The kernel code that runs is byte for byte the installed one.

Before JAX 0.6 that module indexes refs with ``pl.load``/``pl.store`` and Python
ints (``ref[(0, 0)]``-style batch indices); the generic interpreter's discharge
rule for ``load`` then crashes with ``'int' object has no attribute 'shape'``.
The private namespace's ``load``/``store`` turn those ints into int32 scalars
first (``_int_indexer_shim``). The shim is gated to ``jax < 0.6`` and tested.

The Pallas TPU adapters (``kernels.adapters.tpu_flash``, ``kernels.adapters.splash``) share two things
from here: ``pallas_tpu_availability`` (the execution, TPU interpret mode's presence,
the kernel module's import) and ``pallas_ran`` (the "ran" string: pallas_calls traced,
and how they ran).

A kernel that TPU interpret mode may or may not run (its gap is a fact of each release, not
a version range we can know ahead) is decided by observation: ``probe_failure(call)`` runs a tiny
call and says in one line why it failed, or None.

Race detection (the ``races`` check) lives here too: ``detect_races(call)`` runs a call with
TPU interpret mode's happens-before race detector on and two simulated cores, and reads what
it found. An adapter whose kernels run inside ``TpuExecution.context()`` declares
``Capabilities.race_detection=race_detection_declared(execution)`` and needs nothing else.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import importlib.util
import io
import logging
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from kernels.contract.base import Availability, Execution
from kernels.runtime.jax_runtime import (
    TracedPrimitives,
    default_backend,
    installed_jax_versions,
    jax_version,
    unavailable_because,
)
from kernels.runtime.standalone import source_of

Interpreter = Literal["generic", "tpu"]
INTERPRETERS: tuple[Interpreter, ...] = ("generic", "tpu")

# First JAX version with pltpu.force_tpu_interpret_mode (TPU interpret mode as a context).
TPU_INTERPRET_MODE_SINCE = (0, 7, 0)
# Why the vmap check cannot run a Mosaic TPU kernel in TPU interpret mode (``JaxCall.no_vmap``),
# read in JAX 0.12's pallas/mosaic/interpret/interpret_pallas_call.py: jax.vmap prepends a grid axis
# to a pallas_call, and the interpreter pairs the grid with the kernel's own dimension_semantics,
# one shorter, where Mosaic's lowering gives the vmapped axes their own (pallas/mosaic/lowering.py).
# Observed (tokamax's Mosaic TPU, tpu_flash): ValueError "safe_zip() argument 1 has length 2 but
# argument 0 has length 3" in _get_randomized_grid_coordinates.
TPU_INTERPRET_NO_VMAP = (
    "Pallas TPU interpret mode cannot run a vmapped Mosaic TPU kernel: jax.vmap adds a grid axis and "
    "the interpreter pairs the grid with the kernel's dimension_semantics, which do not name it "
    "(ValueError from safe_zip), where Mosaic's own lowering adds vmapped axes to them: an interpreter "
    "limit, not the kernel's"
)
# Last JAX minor whose TPU flash kernel indexes refs through pl.load/pl.store with Python ints.
INT_INDEXER_SHIM_BEFORE = (0, 6, 0)

# Private module names under which interpreted copies are registered; a name
# outside any real package so it can never shadow or be mistaken for JAX's module.
_COPY_PREFIX = "_attention_conformance_interpreted."


@dataclasses.dataclass(frozen=True)
class TpuExecution:
    """How TPU kernels run in this process: ``native``, ``generic`` or ``tpu`` (see module doc)."""

    mode: Literal["native", "generic", "tpu"]

    @property
    def kind(self) -> Execution:
        """``Availability.execution``: both interpreters are interpret mode."""
        return "native" if self.mode == "native" else "interpret"

    @property
    def description(self) -> str:
        return {
            "native": "native Mosaic on TPU",
            "generic": "Pallas generic interpreter (interpret=True) on CPU",
            "tpu": "Pallas TPU interpret mode (force_tpu_interpret_mode) on CPU",
        }[self.mode]

    @contextlib.contextmanager
    def context(self, cores: int = 1) -> Iterator[None]:
        """Wrap tracing *and* execution in this; the TPU interpret mode is a tracing-time setting.
        ``cores``: TensorCores TPU interpret mode simulates (a kernel that splits its grid over a
        megacore chip's two, such as paged attention's ``megacore_mode``, needs 2)."""
        if self.mode != "tpu":
            yield
            return
        from jax.experimental.pallas import tpu as pltpu

        params = interpret_params(cores)
        # detect_races() sets the detector's parameters for the calls made inside it.
        params.update(_DETECTING.get() or {})
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(**params)):
            yield


def tpu_interpret_mode_missing(fix: str = "drop [interpreter=tpu] (the generic interpreter)") -> str | None:
    """Why TPU interpret mode cannot run on this JAX, or None when it can; ``fix``: what the
    user can do instead, appended to the reason."""
    if jax_version() < TPU_INTERPRET_MODE_SINCE:
        return f"TPU interpret mode (pltpu.force_tpu_interpret_mode) arrived in JAX 0.7.0; {fix}"
    from jax.experimental.pallas import tpu as pltpu

    if not hasattr(pltpu, "force_tpu_interpret_mode") or not hasattr(pltpu, "InterpretParams"):
        return f"this JAX has no pltpu.force_tpu_interpret_mode/InterpretParams; {fix}"
    return None


def choose_execution(interpreter: Interpreter) -> TpuExecution:
    """Native on a TPU; otherwise the requested interpreter (the caller checked it is available)."""
    if interpreter not in INTERPRETERS:
        raise ValueError(f"unknown interpreter {interpreter!r}; use one of {INTERPRETERS}")
    if default_backend() == "tpu":
        return TpuExecution("native")
    return TpuExecution(interpreter)


def pallas_tpu_availability(
    interpreter: Interpreter,
    module_name: str,
    load: Callable[[TpuExecution], object],
    fix: str = "drop [interpreter=tpu] (the generic interpreter)",
) -> Availability:
    """Whether a Pallas TPU kernel runs here, and how: natively on a TPU, else through
    ``interpreter`` (TPU interpret mode needs JAX >= 0.7.0; ``fix``: the way out without it).
    ``load(execution)`` imports the kernel's entry points from ``module_name``; any failure
    there makes it unavailable, never a crash."""
    try:
        execution = choose_execution(interpreter)
        if execution.mode == "tpu":
            missing = tpu_interpret_mode_missing(fix)
            if missing is not None:
                return Availability(False, missing, installed_jax_versions())
        load(execution)
    except Exception as error:  # any import/API failure means "unavailable", never a crash
        return unavailable_because(error, f"importing {module_name}")
    return Availability(True, "", installed_jax_versions(), execution.kind, execution.description)


def pallas_ran(primitives: TracedPrimitives, execution: TpuExecution, fallback: str) -> str:
    """What ran: ``"pallas_call x2 (<execution>)"``; a trace without a pallas_call says so
    (``"no pallas_call traced: <fallback> (<execution>)"``) instead of passing silently."""
    n = primitives.count("pallas_call")
    if n == 0:
        return f"no pallas_call traced: {fallback} ({execution.description})"
    return f"pallas_call x{n} ({execution.description})"


# --- observing whether the interpreter runs a kernel --------------------------------------

# The logger through which JAX's io_callback reports an exception raised inside the TPU
# interpreter (with its traceback, at ERROR) before the call itself raises.
_CALLBACK_LOGGER = "jax._src.callback"
FAILURE_LINE_CHARS = 300  # a reason stays one readable line


def probe_failure(call: Callable[[], object]) -> str | None:
    """Run ``call`` (a tiny kernel call the caller makes inside ``TpuExecution.context()``) and
    return None when it ran, else one line naming why not (``failure_line``). The interpreter's
    own log of the failure is held back: the failure is expected, and the line says it all."""
    logger = logging.getLogger(_CALLBACK_LOGGER)
    logger.addFilter(_drop)
    try:
        call()
    except Exception as error:  # noqa: BLE001 - any failure is the observation
        return failure_line(error)
    finally:
        logger.removeFilter(_drop)
    return None


def _drop(record: logging.LogRecord) -> bool:
    return False


def failure_line(error: BaseException) -> str:
    """One line for ``error``. An exception raised inside the interpreter's callback reaches the
    caller as a runtime error whose message holds that callback's traceback; its last line names
    the real cause (``AttributeError: 'ReshapeTransform' object has no attribute 'indices'``)."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback (most recent call last)" in text:
        line = f"{lines[-1]} (raised in the interpreter's callback; {type(error).__name__})"
    else:
        line = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return line if len(line) <= FAILURE_LINE_CHARS else line[: FAILURE_LINE_CHARS - 1] + "…"


def interpreted_copy(module_name: str) -> types.ModuleType:
    """A private copy of ``module_name`` whose ``pl.pallas_call`` always interprets (with the
    int-indexer shim on JAX < 0.6). Idempotent: see ``load_interpreting_copy``."""
    return load_interpreting_copy(module_name, jax_version() < INT_INDEXER_SHIM_BEFORE)


# --- race detection: TPU interpret mode's happens-before detector ---------------------------

# Simulated TensorCores per chip while detecting. A megacore chip (v4, v5p) and v7x have two,
# and programs of a grid dimension declared 'parallel' race only when they run on different
# cores: with one core, the interpreter runs them one after another.
RACE_DETECTION_CORES = 2

# InterpretParams' field for the simulated cores, by release: num_cores_per_device (0.7),
# num_cores_or_threads_per_device (0.8), num_cores_or_threads (0.9 and later).
_CORE_FIELDS = ("num_cores_or_threads", "num_cores_or_threads_per_device", "num_cores_per_device")

# What the detector prints for each race (every release since 0.7.0); it keeps no list.
_RACE_MARK = "RACE DETECTED"

# The InterpretParams overrides TpuExecution.context() applies: set only inside detect_races(),
# which is how a check reaches the interpret parameters of the calls an adapter makes.
_DETECTING: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "attention_conformance_detecting_races", default=None
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RaceFindings:
    """What the race detector saw during one call.

    cores: simulated cores per chip. observed: the detector recorded memory accesses of a
    pallas_call made during the call (False: nothing ran under it, so nothing was checked).
    races: one line per race printed, e.g. ``write of ('hbm', 101, 0, 0)[0:8, 0:128] from 0,
    1, pallas_call / write of ... from 0, 0, pallas_call`` (the buffer: memory space, buffer
    id, device, core; then the accessing device, core and source line). flagged: the
    detector's own ``races_found`` after the last pallas_call.
    """

    cores: int
    observed: bool
    races: tuple[str, ...]
    flagged: bool

    @property
    def found(self) -> bool:
        return bool(self.races) or self.flagged


def _interpret_params_fields() -> set[str]:
    from jax.experimental.pallas import tpu as pltpu

    return {f.name for f in dataclasses.fields(pltpu.InterpretParams)}


def race_detection_missing() -> str | None:
    """Why this JAX cannot detect races between simulated cores, or None when it can."""
    missing = tpu_interpret_mode_missing(fix="races can only be checked on JAX >= 0.7.0")
    if missing is not None:
        return missing
    fields = _interpret_params_fields()
    if "detect_races" not in fields:
        return "this JAX's TPU interpret mode has no race detector (InterpretParams.detect_races)"
    if not any(name in fields for name in _CORE_FIELDS):
        return (
            "this JAX's TPU interpret mode simulates one core only (no InterpretParams field "
            f"among {_CORE_FIELDS}), so races between cores cannot show"
        )
    return None


def race_detection_declared(execution: TpuExecution) -> bool:
    """``Capabilities.race_detection`` of an adapter whose kernels run in ``execution.context()``:
    True under TPU interpret mode on a JAX with a race detector."""
    return execution.mode == "tpu" and race_detection_missing() is None


def _core_field() -> str:
    """This release's InterpretParams field for the simulated cores per chip (``_CORE_FIELDS``)."""
    fields = _interpret_params_fields()
    name = next((name for name in _CORE_FIELDS if name in fields), None)
    if name is None:
        raise TypeError(
            f"this JAX's TPU interpret mode simulates one core only (no field among {_CORE_FIELDS})"
        )
    return name


def interpret_params(cores: int = 1) -> dict[str, Any]:
    """The InterpretParams keywords that simulate ``cores`` TensorCores (none for one)."""
    return {} if cores == 1 else {_core_field(): cores}


def race_detecting_params(cores: int = RACE_DETECTION_CORES) -> dict[str, Any]:
    """The InterpretParams keywords that switch the detector on with ``cores`` simulated cores.

    From JAX 0.12 the detector raises at the first race unless ``on_race="warn"``: warned, every
    race of the call is reported (logged) and the call finishes, as every earlier release did
    (printed), so the check names each race and the numbers still come back."""
    params = {"detect_races": True, _core_field(): cores}
    if "on_race" in _interpret_params_fields():
        params["on_race"] = "warn"
    return params


class _LoggedRaces(logging.Handler):
    """Collects the races the detector logs: JAX >= 0.12 logs each at WARNING instead of printing
    it, through its module's logger for a read and the root logger for a write, so this sits on the
    root (which both reach) and keeps only the detector's messages."""

    def __init__(self, sink: io.StringIO) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(_RACE_MARK):
            self.sink.write(message + "\n")


def _interpreter_module() -> types.ModuleType:
    """The module holding the detector's state (``races``): where force_tpu_interpret_mode is
    defined (``jax._src.pallas.mosaic.interpret`` in 0.7, ``...interpret.interpret_pallas_call`` after)."""
    from jax.experimental.pallas import tpu as pltpu

    return sys.modules[pltpu.force_tpu_interpret_mode.__module__]


def detect_races(call: Callable[[], T], cores: int = RACE_DETECTION_CORES) -> tuple[T, RaceFindings]:
    """``call()`` with the race detector on for every pallas_call it makes inside
    ``TpuExecution("tpu").context()``, and ``cores`` simulated cores; (its value, the findings).

    The detector prints (JAX >= 0.12: logs) each race and keeps a fresh state per pallas_call
    (module global ``races``): the printed lines cover every pallas_call of the call, the state the
    last one (its flag, and proof that the detector ran). Printed text is passed on.
    """
    missing = race_detection_missing()
    if missing is not None:
        raise RuntimeError(f"cannot detect races here: {missing}")
    module = _interpreter_module()
    before = getattr(module, "races", None)
    printed = io.StringIO()
    token = _DETECTING.set(race_detecting_params(cores))
    logged = _LoggedRaces(printed)
    interpreter_log = logging.getLogger()
    interpreter_log.addHandler(logged)
    try:
        with contextlib.redirect_stdout(printed):
            value = call()
    except BaseException:
        # The interpreter keeps its shared state after an exception; later calls need it reset.
        _reset_interpreter_state()
        raise
    finally:
        interpreter_log.removeHandler(logged)
        _DETECTING.reset(token)
        sys.stdout.write(printed.getvalue())
    # One state per pallas_call; it records accesses only while the detector is on.
    last = getattr(module, "races", None)
    observed = last is not None and last is not before and bool(last.reads or last.writes)
    return value, RaceFindings(
        cores=cores,
        observed=observed,
        races=parse_races(printed.getvalue()),
        flagged=bool(getattr(last, "races_found", False)) if observed else False,
    )


def _reset_interpreter_state() -> None:
    from jax.experimental.pallas import tpu as pltpu

    reset = getattr(pltpu, "reset_tpu_interpret_mode_state", None)
    if reset is not None:
        reset()


_SLICE = re.compile(r"slice\((\d+), (\d+), (?:1|None)\)")
# The accessing (device, core): ``from 0, 1`` up to JAX 0.11, ``from (0, 1)`` (a thread key) in 0.12.
_THREAD = re.compile(r"from \((\d+), (\d+)\)")


def parse_races(printed: str) -> tuple[str, ...]:
    """One line per race in the detector's printed text: its two accesses, slices as ``a:b``,
    the vector clocks left out."""
    races = []
    for block in printed.split(_RACE_MARK)[1:]:
        accesses = [
            line.strip()
            for line in block.strip().splitlines()
            if line.strip() and not line.strip().startswith("clock:")
        ]
        line = _THREAD.sub(r"from \1, \2", " / ".join(accesses[:2]))
        races.append(_SLICE.sub(r"\1:\2", line).replace("[(", "[").replace(")]", "]"))
    return tuple(races)


# --- the shim: pure functions, embedded verbatim in standalone repro scripts ----------------


def load_interpreting_copy(module_name: str, int_indexer_shim: bool) -> types.ModuleType:
    """A private copy of ``module_name`` (the installed file, executed again) whose ``pl`` has
    ``pallas_call(..., interpret=True)``; ``int_indexer_shim``: also ``_int_indexer_shim``'s
    load/store (JAX < 0.6).

    Idempotent: the copy is registered in ``sys.modules`` under a private name
    (dataclasses in the module need their module registered while the class is
    built) and reused on later calls, like any import.
    """
    private_name = _COPY_PREFIX + module_name
    if private_name in sys.modules:
        return sys.modules[private_name]
    original = importlib.import_module(module_name)
    spec = importlib.util.spec_from_file_location(private_name, original.__file__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot re-load {module_name} from {original.__file__}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[private_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private_name]
        raise
    module.pl = _PallasView(module.pl, **interpreting_overrides(module.pl, int_indexer_shim))
    return module


class _PallasView:
    """``jax.experimental.pallas`` as the private copy sees it: every name delegates to
    the real module (lazily, so deprecated names warn only if the kernel uses them),
    except the overrides set on the instance."""

    def __init__(self, pl: types.ModuleType, **overrides: Any) -> None:
        self._pl = pl
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pl, name)


def interpreting_overrides(pl: Any, int_indexer_shim: bool) -> dict[str, Any]:
    """The names the private copy's ``pl`` replaces: ``pallas_call(..., interpret=True)``, and
    the shim's ``load``/``store`` when asked."""
    overrides: dict[str, Any] = {"pallas_call": functools.partial(pl.pallas_call, interpret=True)}
    if int_indexer_shim:
        overrides["load"], overrides["store"] = _int_indexer_shim(pl)
    return overrides


def _int_indexer_shim(pl: Any) -> tuple[Any, Any]:
    """``pl.load``/``pl.store`` that pass Python-int indices as int32 scalars (jax < 0.6 only).

    The generic interpreter's load discharge rule asks every non-slice index for
    ``.shape``; a 0-d int32 array has one and selects the same element.
    """
    import jax.numpy as jnp

    def as_arrays(idx: Any) -> Any:
        idx = idx if isinstance(idx, tuple) else (idx,)
        return tuple(jnp.int32(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in idx)

    def load(ref: Any, idx: Any, **kwargs: Any) -> Any:
        return pl.load(ref, as_arrays(idx), **kwargs)

    def store(ref: Any, idx: Any, val: Any, **kwargs: Any) -> Any:
        return pl.store(ref, as_arrays(idx), val, **kwargs)

    return load, store


def standalone_shim() -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(imports, definitions, int_indexer_shim) of the interpreting copy, for a standalone script
    (``kernels.runtime.standalone``): the functions above, verbatim, and this JAX's shim decision."""
    imports = ("import functools", "import importlib", "import importlib.util", "import sys", "import types")
    definitions = (
        f"_COPY_PREFIX = {_COPY_PREFIX!r}  # outside any real package: it never shadows JAX's module\n",
        *source_of(load_interpreting_copy, _PallasView, interpreting_overrides, _int_indexer_shim),
    )
    return imports, definitions, jax_version() < INT_INDEXER_SHIM_BEFORE
