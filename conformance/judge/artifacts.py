"""What the checks of one case share: inputs, reference, baseline, and the subject's calls.

``Oracle`` holds the subject-independent part (inputs, float64 reference, baseline),
keyed by ``Case.data_id`` so two subjects (or configs) on the same case share one reference.
``SubjectRun`` holds one subject's calls on one case. Each is computed once, on first
use, and kept in a small LRU owned by the session (``ArtifactStore``): checks of a
case run back to back, so a handful of entries is enough. The reference, the baselines
and a built-in subject's lowerings are also kept on disk across runs and workers, by value
(``settled_cache.py``), when the run has a cache folder.

Every subject call gets its own copy of the inputs: a subject that writes into its
inputs must neither corrupt the shared reference nor other checks, and the copy is
what ``no_mutation`` compares afterwards.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from conformance.judge import baseline as plain
from conformance.judge import inputs as case_inputs
from conformance.judge.baseline import BaselineGrads, BaselineOutput, Numerics
from conformance.judge.settled_cache import NOTHING_KEPT, SettledCache, Unkeyable, built_in, value_digest
from conformance.plan import subject_warnings
from conformance.plan.cases import Case
from kernels.contract import features
from kernels.contract.base import Adapter, SubjectGrads, SubjectOutput
from kernels.hardware.lowering import (
    LoweredKernel,
    Lowering,
    LoweringCall,
    TracedBlock,
    TracedKernel,
    VmemFootprint,
    lower,
)
from kernels.hardware.shared_memory import SharedMemoryFootprint, StagedTile
from reference import ReferenceGrads, ReferenceOutput, attention_backward, attention_forward
from reference.spec import AttentionInputs

INPUT_FIELDS = ("q", "k", "v", *features.input_fields())  # every array a call receives
# What a settled entry may be read back as (settled_cache.py): the dataclasses each result is made of.
ORACLE_TYPES = (ReferenceOutput, ReferenceGrads, BaselineOutput, BaselineGrads)
LOWERING_TYPES = (
    Lowering,
    LoweredKernel,
    VmemFootprint,
    TracedKernel,
    TracedBlock,
    SharedMemoryFootprint,
    StagedTile,
)


class SubjectError(Exception):
    """The subject raised: carries the call ("forward"/"gradients") and the original exception."""

    def __init__(self, call: str, error: BaseException):
        super().__init__(f"{call} raised {type(error).__name__}: {error}")
        self.call = call
        self.error = error


@dataclasses.dataclass(frozen=True, eq=False)
class Call:
    """One subject call: its value (or the exception), wall time, which inputs it changed, and
    the warnings it raised (``subject_warnings.line``: ``"DeprecationWarning: ..."``, each once)."""

    value: Any
    error: BaseException | None
    seconds: float
    mutated: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    def get(self, call: str) -> Any:
        if self.error is not None:
            raise SubjectError(call, self.error) from self.error
        return self.value


def copy_inputs(inputs: AttentionInputs) -> AttentionInputs:
    """A deep copy: fresh, writable arrays (the subject may keep or mutate them)."""
    return dataclasses.replace(
        inputs,
        **{
            f: None if getattr(inputs, f) is None else np.array(getattr(inputs, f), copy=True)
            for f in INPUT_FIELDS
        },
    )


def changed_fields(before: AttentionInputs, after: AttentionInputs) -> tuple[str, ...]:
    """Names of the input arrays whose bytes differ (NaN-safe: compares bytes, not values)."""
    changed = []
    for name in INPUT_FIELDS:
        a, b = getattr(before, name), getattr(after, name)
        if a is None and b is None:
            continue
        if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            changed.append(name)
    return tuple(changed)


def timed_call(fn: Callable[[], Any]) -> tuple[Any, BaseException | None, float, tuple[str, ...]]:
    """(value, exception, seconds, warnings) of ``fn()``; its warnings are captured and passed on."""
    warned: list[str] = []
    start = time.perf_counter()
    try:
        with subject_warnings.capturing(warned):
            value, error = fn(), None
    except Exception as exc:  # noqa: BLE001 - the subject's exception is the result
        value, error = None, exc
    return value, error, time.perf_counter() - start, tuple(warned)


def call_forward(adapter: Adapter, case: Case, inputs: AttentionInputs) -> Call:
    """``adapter.forward`` on a private copy of ``inputs``; records any mutation of it."""
    mine = copy_inputs(inputs)
    value, error, seconds, warned = timed_call(lambda: adapter.forward(mine, case.spec))
    return Call(value, error, seconds, changed_fields(inputs, mine), warned)


def call_gradients(adapter: Adapter, case: Case, inputs: AttentionInputs, dout: np.ndarray) -> Call:
    """``adapter.gradients`` on private copies of ``inputs`` and ``dout``."""
    mine, my_dout = copy_inputs(inputs), np.array(dout, copy=True)
    value, error, seconds, warned = timed_call(lambda: adapter.gradients(mine, case.spec, my_dout))
    mutated = changed_fields(inputs, mine)
    if my_dout.tobytes() != np.asarray(dout).tobytes():
        mutated += ("dout",)
    return Call(value, error, seconds, mutated, warned)


class Oracle:
    """Subject-independent artifacts of one case, each computed on first use."""

    def __init__(self, case: Case, settled: SettledCache = NOTHING_KEPT):
        self.case = case
        self.settled = settled
        self.timings: dict[str, float] = {}
        # One baseline per declared arithmetic (``baseline.Numerics``): subjects sharing this
        # case's reference may differ in it (an fp8 kernel that rounds P, one that does not).
        self._baselines: dict[Numerics, BaselineOutput] = {}
        self._baseline_grads: dict[Numerics, BaselineGrads] = {}

    def _timed(self, name: str, parts: tuple[Any, ...], fn: Callable[[], Any]) -> Any:
        """``fn()``, or its settled value under ``name`` and ``parts`` (what it is a function of)."""
        start = time.perf_counter()
        value = self.settled.get_or_compute(name.removesuffix("_s"), parts, fn, ORACLE_TYPES)
        self.timings[name] = time.perf_counter() - start
        return value

    @functools.cached_property
    def inputs(self) -> AttentionInputs:
        return case_inputs.build_inputs(self.case)

    @functools.cached_property
    def _data(self) -> tuple[Any, ...]:
        """The case's inputs and spec by value, hashed once: every settled result of the case is
        keyed by them (``settled_cache.value_digest``; as themselves where they cannot be hashed,
        which the cache then refuses to store)."""
        try:
            return (value_digest(self.inputs, self.case.spec),)
        except Unkeyable:
            return (self.inputs, self.case.spec)

    @functools.cached_property
    def _gradient_data(self) -> tuple[Any, ...]:
        """``_data`` and the output gradient the backward results are taken against."""
        return (*self._data, value_digest(self.dout))

    @functools.cached_property
    def reference(self) -> ReferenceOutput:
        inputs, spec = self.inputs, self.case.spec
        return self._timed("reference_forward_s", self._data, lambda: attention_forward(inputs, spec))

    def baseline_for(self, model: Numerics) -> BaselineOutput:
        """The baseline of a subject whose arithmetic is ``model`` (``baseline.numerics``)."""
        if model not in self._baselines:
            inputs, spec = self.inputs, self.case.spec
            self._baselines[model] = self._timed(
                "baseline_forward_s", (*self._data, model), lambda: plain.forward(inputs, spec, model)
            )
        return self._baselines[model]

    def baseline_grads_for(self, model: Numerics) -> BaselineGrads:
        """The baseline's gradients for a subject whose arithmetic is ``model``."""
        if model not in self._baseline_grads:
            inputs, spec, dout = self.inputs, self.case.spec, self.dout
            self._baseline_grads[model] = self._timed(
                "baseline_backward_s",
                (*self._gradient_data, model),
                lambda: plain.gradients(inputs, spec, dout, model),
            )
        return self._baseline_grads[model]

    @property
    def baseline(self) -> BaselineOutput:
        """The baseline of a subject that declares nothing about its arithmetic."""
        return self.baseline_for(Numerics())

    @functools.cached_property
    def dout(self) -> np.ndarray:
        return case_inputs.build_dout(self.case, self.reference.fully_masked)

    @functools.cached_property
    def reference_grads(self) -> ReferenceGrads:
        inputs, dout, spec = self.inputs, self.dout, self.case.spec
        return self._timed(
            "reference_backward_s",
            self._gradient_data,
            lambda: attention_backward(inputs, dout, spec, self.reference),
        )

    @property
    def baseline_grads(self) -> BaselineGrads:
        return self.baseline_grads_for(Numerics())

    @property
    def valid_rows(self) -> np.ndarray:
        """[B, Hq, Sq] bool: rows that may attend to some key (compared numerically)."""
        return ~self.reference.fully_masked


# Each adapter's lowerings by program (``LoweringCall.program_key``), for the adapter's life, as its
# compiled calls are kept (``CompiledCache``): cases that differ only in their values (a seed, a
# fill) lower one program, once. At ci most cases share their program with another case.
_LOWERED: weakref.WeakKeyDictionary[Any, dict[Hashable, Lowering]] = weakref.WeakKeyDictionary()


def lower_shared(adapter: Adapter, call: LoweringCall) -> Lowering:
    """``lower(call)``, or the lowering ``adapter`` already made of the same program in this process;
    a call without a key (``LoweringCall.key``) is always lowered."""
    key = call.program_key()
    try:
        lowered = _LOWERED.setdefault(adapter, {}) if key is not None else None
    except TypeError:  # an adapter that cannot be weakly referenced or hashed keeps nothing
        lowered = None
    if lowered is None:
        return lower(call)
    if key not in lowered:
        lowered[key] = lower(call)
    return lowered[key]


class SubjectRun:
    """One subject's first forward and gradients calls on a case, shared by its checks."""

    def __init__(self, case: Case, adapter: Adapter, oracle: Oracle):
        self.case, self.adapter, self.oracle = case, adapter, oracle
        self._lowerings: dict[str, Lowering] = {}

    def _lower(self, call: LoweringCall, direction: str) -> Lowering:
        """``lower(call)``, settled across runs for a built-in adapter, whose code the cache's key
        holds; a plug-in's or a test's adapter lives outside it, so its lowering is done in every
        run. Within a run, one per program (``lower_shared``). ``seconds`` is what this case spent,
        loading included."""
        start = time.perf_counter()
        compute = functools.partial(lower_shared, self.adapter, call)
        if built_in(type(self.adapter)):
            parts = (self.case, direction, type(self.adapter).__qualname__, call.platform, call.device_kind)
            lowering = self.oracle.settled.get_or_compute("lowering", parts, compute, LOWERING_TYPES)
        else:
            lowering = compute()
        return dataclasses.replace(lowering, seconds=time.perf_counter() - start)

    def lowering(self, direction: str) -> Lowering:
        """The ``direction`` call (``forward``/``backward``) lowered for the subject's hardware
        with the interpreter off (``Adapter.lowering``), once: lowers, vmem and observable share it.
        An adapter that raises while building the call is a failure to lower, recorded as such."""
        if direction not in self._lowerings:
            start = time.perf_counter()
            try:
                call = self.adapter.lowering(self.oracle.inputs, self.case.spec, direction)
            except Exception as error:  # noqa: BLE001 - a kernel rejecting the case while being built
                platform = getattr(self.adapter.capabilities(), "lowers_for", None) or "tpu"
                self._lowerings[direction] = Lowering(
                    platform, f"{type(error).__name__}: {error}", seconds=time.perf_counter() - start
                )
            else:
                self._lowerings[direction] = self._lower(call, direction)
        return self._lowerings[direction]

    @functools.cached_property
    def forward_call(self) -> Call:
        return call_forward(self.adapter, self.case, self.oracle.inputs)

    @functools.cached_property
    def gradients_call(self) -> Call:
        return call_gradients(self.adapter, self.case, self.oracle.inputs, self.oracle.dout)

    @property
    def forward(self) -> SubjectOutput:
        """The subject's output (raises SubjectError if the call raised)."""
        return self.forward_call.get("forward")

    @property
    def gradients(self) -> SubjectGrads:
        return self.gradients_call.get("gradients")

    def warnings(self) -> tuple[str, ...]:
        """What the forward and gradients calls made so far raised, each once."""
        calls = (self.__dict__.get(name) for name in ("forward_call", "gradients_call"))
        return subject_warnings.distinct(w for call in calls if call is not None for w in call.warnings)

    def timings(self) -> dict[str, float]:
        out = dict(self.oracle.timings)
        for name in ("forward_call", "gradients_call"):
            call = self.__dict__.get(name)
            if call is not None:
                out[f"subject_{name.removesuffix('_call')}_s"] = call.seconds
        return out


class ArtifactStore:
    """A small LRU of Oracles (by semantic id) and SubjectRuns (by case id)."""

    def __init__(self, capacity: int = 6, settled: SettledCache = NOTHING_KEPT):
        self.capacity = capacity
        self.settled = settled
        self._oracles: collections.OrderedDict[str, Oracle] = collections.OrderedDict()
        self._runs: collections.OrderedDict[str, SubjectRun] = collections.OrderedDict()

    def _lru(self, table: collections.OrderedDict, key: str, make: Callable[[], Any]) -> Any:
        if key in table:
            table.move_to_end(key)
        else:
            table[key] = make()
            while len(table) > self.capacity:
                table.popitem(last=False)
        return table[key]

    def oracle(self, case: Case) -> Oracle:
        return self._lru(self._oracles, case.data_id, lambda: Oracle(case, self.settled))

    def run(self, case: Case, adapter: Adapter) -> SubjectRun:
        return self._lru(self._runs, case.case_id, lambda: SubjectRun(case, adapter, self.oracle(case)))
