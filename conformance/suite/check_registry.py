"""Every check, declared once: what it is called, what it needs, how it samples cases, and
what a failure's repro script does.

Adding a check is one ``CheckDeclaration`` here plus its function (``CheckContext ->
Outcome``). Everything else iterates ``REGISTRY``: the planner (which cases, which
needs), the runner (function, shrinking), the pytest entry points
(``conformance/test_checks.py``), repro scripts (by recipe), user cases, and the report
grid's order and labels. No code path branches on a check's name: it reads the declared
attribute instead (``tests/test_check_names.py`` holds that).

This module imports nothing but the standard library: the report tools read it
(``reports.run_report.grid``) and run without NumPy or JAX (``nox -s gate``). Functions are named by
``module:function`` and imported when a check first runs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args

# What a check can need from a subject's declared capabilities. A subject that lacks one
# gets the check as ``unsupported`` with NEED_REASONS[need]: a check that cannot observe a
# subject never passes vacuously.
Need = Literal[
    "backward",
    "lse",
    "kv_cache",
    "jax_runtime",
    "race_detection",
    "lowering",
    "tpu_lowering",
    "gpu_lowering",
    "tunables",
    "dropout",
    "api_contract",
]
NEED_REASONS: dict[str, str] = {
    "backward": "backward pass not declared",
    "lse": "lse not exposed",
    "kv_cache": (
        "no KV cache written by the call (Capabilities.kv_cache): the subject takes no cache to update"
    ),
    "jax_runtime": (
        "no JAX runtime declared (Capabilities.jax_runtime): this check observes JAX's "
        "compilations and live arrays, which a subject outside JAX does not create"
    ),
    "race_detection": (
        "no race detector to run it under (Capabilities.race_detection): declared by subjects "
        "run through Pallas TPU interpret mode (NAME[interpreter=tpu]) on a JAX whose interpret "
        "mode detects races (InterpretParams.detect_races, JAX >= 0.7.0)"
    ),
    "lowering": (
        "no target hardware to lower for (Capabilities.lowers_for): declared by Pallas kernels, "
        "whose adapters build their call with the interpreter off (Adapter.lowering)"
    ),
    "tpu_lowering": (
        "not lowered to Mosaic TPU kernels (Capabilities.lowers_for == 'tpu'): VMEM and the "
        "cost estimate exist only there (Pallas's Triton custom call carries a name, no cost estimate)"
    ),
    "gpu_lowering": (
        "not lowered to Triton kernels for CUDA (Capabilities.lowers_for == 'cuda'): shared memory is "
        "what a Triton kernel asks of its GPU"
    ),
    "tunables": (
        "no tunables declared (Capabilities.tunables): the subject takes no config whose blocks the "
        "traced kernel could show"
    ),
    "dropout": (
        "no dropout declared (Capabilities.dropout): the API takes neither a dropout mask nor a "
        "dropout rate with a key"
    ),
    "api_contract": (
        "no API contract declared (Capabilities.api_contract): the API documents no implementation "
        "list, no default implementation, and no precision or logits_dtype argument"
    ),
}

# Which planned cases a check runs on:
#   every_case          every case of the catalogue;
#   declared_cases      every case for a subject that declares the check's needs; one item
#                       (unsupported, with the reason) for any other subject;
#   fully_masked_cases  cases where some query row sees no key;
#   raising_cases       cases outside a constraint declared to raise (the call must raise);
#   runtime_sample      the largest cheap runnable cases, a few per dtype (calls repeat);
#   batched_sample      like runtime_sample, among the cases with batch >= 2, those whose
#                       requests differ by more than values (lengths, segment ids, a bias or mask
#                       with a batch axis) first; a subject with none keeps one item, unsupported;
#   one_batched_case    one of batched_sample's cases, float32 first (a batching rule is structure:
#                       one case shows it); without a batch >= 2 case, the largest cheap one;
#   vmap_cases          one_batched_case's case and, where its requests differ by per-request
#                       inputs, one batched case whose requests differ only in values (a subject
#                       that builds a per-row input into its function can vmap only the second);
#   one_case            one cheap case with the largest output (a per-call leak stands out);
#   one_backward_case   one cheap case, float32 first, whose backward runs where any case's does
#                       (a check that judges both directions under one mask; api_contract, whose
#                       promises concern the API, not a shape, takes the same one case);
#   race_sample         a few cheap cases per dtype with parallel work inside one kernel call;
#   lowering_cases      every case and config, those declared to raise included (they must
#                       fail to lower), both directions, lowered for the target hardware;
#   lowered_cases       every case that no constraint declares to raise (what lowers is measured);
#   config_cases        the lowered cases that carry a config (a ``cfg-`` id: tunables set); a
#                       subject without any gets one item, unsupported with its reason.
Sampling = Literal[
    "every_case",
    "declared_cases",
    "fully_masked_cases",
    "raising_cases",
    "runtime_sample",
    "batched_sample",
    "one_batched_case",
    "vmap_cases",
    "one_case",
    "one_backward_case",
    "race_sample",
    "lowering_cases",
    "lowered_cases",
    "config_cases",
]
# Samplings whose checks only lower (or trace) the call: they run for a subject that cannot
# execute here but whose call lowers for its target (Availability.lowerable).
LOWERING_SAMPLINGS: tuple[str, ...] = ("lowering_cases", "lowered_cases", "config_cases")

# What a failure's repro script does: its recipe. ``conformance/judge/standalone.py`` writes it
# self-contained where the subject's adapter has ``standalone()``; ``conformance/judge/repro.py``
# writes one that runs from the checkout otherwise.
#   out_tensor        out against the float64 answer, under the tolerance the suite judged with;
#   lse_tensor        lse likewise;
#   gradient_tensors  dq, dk, dv (dbias, dsinks where judged) likewise, after the backward call;
#   call_raises       the call, declared to raise: the bug is present while it returns;
#   nonfinite         NaN/Inf in out and lse where the float64 answer is finite (in the
#                     gradients too, where the case's backward pass ran);
#   output_shapes     each output's shape and dtype (the gradients' too, where the backward ran);
#   rerun_bitwise     the call twice on the same inputs: the bug is present while they differ;
#   suite_only        none self-contained: the check observes the suite's own machinery
#                     (compilations, live arrays, a race detector, lowering, input copies).
Repro = Literal[
    "out_tensor",
    "lse_tensor",
    "gradient_tensors",
    "call_raises",
    "nonfinite",
    "output_shapes",
    "rerun_bitwise",
    "suite_only",
]


@dataclasses.dataclass(frozen=True)
class CheckDeclaration:
    """One check. ``label`` is how the report grid names it; ``report_rank`` its row there."""

    name: str
    function: str  # "module:function", a CheckFunction
    label: str
    report_rank: int
    needs: tuple[Need, ...] = ()
    sampling: Sampling = "every_case"
    shrinks: bool = True  # a failure is shrunk to a smaller failing case
    on_user_cases: bool = True  # runs on --case cases too
    repro: Repro = "suite_only"

    def __post_init__(self) -> None:
        unknown = set(self.needs) - set(NEED_REASONS)
        if unknown:
            raise ValueError(
                f"check {self.name!r}: unknown needs {sorted(unknown)}; choose from {NEED_REASONS}"
            )
        for field, kind in (("sampling", Sampling), ("repro", Repro)):
            value = getattr(self, field)
            if value not in get_args(kind):
                raise ValueError(
                    f"check {self.name!r}: unknown {field} {value!r}; choose from {get_args(kind)}"
                )
        if ":" not in self.function:
            raise ValueError(f"check {self.name!r}: function {self.function!r} is not 'module:function'")

    @property
    def runs_backward(self) -> bool:
        """Whether the check itself judges the backward pass (so its constraints apply)."""
        return "backward" in self.needs

    def unmet_needs(self, capabilities: Any) -> tuple[str, ...]:
        """The reasons a subject with these capabilities cannot be observed by this check."""
        return tuple(NEED_REASONS[need] for need in self.needs if not getattr(capabilities, need))

    def resolve(self) -> Callable[[Any], Any]:
        return _import(self.function)


@functools.cache
def _import(path: str) -> Callable[[Any], Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_CHECKS = "conformance.judge.checks"

# In the order they run for one case: cached outputs are reused, and a crash in a late
# check cannot hide an early result.
REGISTRY: tuple[CheckDeclaration, ...] = (
    CheckDeclaration(
        "raises",
        f"{_CHECKS}.contract:raises",
        "raises",
        4,
        sampling="raising_cases",
        shrinks=False,
        repro="call_raises",
    ),
    CheckDeclaration(
        "shape_dtype", f"{_CHECKS}.contract:shape_dtype", "shape and dtype", 5, repro="output_shapes"
    ),
    CheckDeclaration("forward", f"{_CHECKS}.numeric:forward", "forward", 0, repro="out_tensor"),
    CheckDeclaration("lse", f"{_CHECKS}.numeric:lse", "lse", 1, needs=("lse",), repro="lse_tensor"),
    CheckDeclaration(
        "kv_cache",
        f"{_CHECKS}.cache:kv_cache",
        "KV cache write-back",
        21,
        needs=("kv_cache",),
        sampling="declared_cases",
    ),
    CheckDeclaration(
        "fully_masked",
        f"{_CHECKS}.masked:fully_masked",
        "fully-masked rows",
        3,
        sampling="fully_masked_cases",
    ),
    CheckDeclaration(
        "backward",
        f"{_CHECKS}.numeric:backward",
        "backward",
        2,
        needs=("backward",),
        repro="gradient_tensors",
    ),
    CheckDeclaration("finite", f"{_CHECKS}.masked:finite", "finite", 6, repro="nonfinite"),
    CheckDeclaration("no_mutation", f"{_CHECKS}.contract:no_mutation", "no input mutation", 7),
    CheckDeclaration(
        "determinism",
        f"{_CHECKS}.runtime:determinism",
        "determinism",
        8,
        sampling="runtime_sample",
        shrinks=False,
        repro="rerun_bitwise",
    ),
    CheckDeclaration(
        "batch_invariance",
        f"{_CHECKS}.batch:batch_invariance",
        "batch invariance",
        9,
        # A sample: the request alone is one more call (and compile) per case. No ``needs``: any
        # subject takes a batch of 1; one whose case cannot be cut per request says why itself.
        sampling="batched_sample",
        shrinks=False,  # a smaller batch changes the neighbours: the failing batch is the repro
    ),
    CheckDeclaration(
        "vmap",
        f"{_CHECKS}.vmap:vmap",
        "jax.vmap",
        18,
        # No ``needs``: a subject without ``Adapter.jax_call`` is unsupported, with that reason.
        sampling="vmap_cases",  # two more programs (forward, backward) per case: one case per form
        shrinks=False,
    ),
    CheckDeclaration(
        "sharded",
        f"{_CHECKS}.sharded:sharded",
        "sharded (simulated devices)",
        19,
        # No ``needs``: a subject without ``Adapter.jax_call``, or a process with one device, is
        # unsupported, with that reason.
        sampling="one_batched_case",  # one more program per direction (a mesh of 4 devices): one case
        shrinks=False,  # the placement needs the case's divisible axes: a smaller case may lose them
    ),
    CheckDeclaration(
        "dropout",
        f"{_CHECKS}.dropout:dropout",
        "dropout (realised mask)",
        20,
        needs=("dropout",),
        # One case: a few calls (the mask passed, or a key's mask read back by probe calls), both
        # directions under one mask; the check's statistics count every weight of that case.
        sampling="one_backward_case",
        shrinks=False,  # a smaller case draws another mask: the failing draw is the repro
    ),
    CheckDeclaration(
        "api_contract",
        f"{_CHECKS}.api_contract:api_contract",
        "API contract (fallback, default, precision)",
        22,
        needs=("api_contract",),
        # One case: a promise about choosing an implementation or about precision holds for an input
        # the API accepts or not; a few calls (the own implementation, the fallback, the default, the
        # precision and logits-dtype calls), float32 first (precision's promise is float32's).
        sampling="one_backward_case",
        shrinks=False,  # the fallback's bits are compared with the own call's: the case is the repro
    ),
    CheckDeclaration(
        "recompile",
        f"{_CHECKS}.runtime:recompile",
        "no recompilation",
        10,
        # No ``needs``: whether the subject runs through JAX is observed on its first call
        # (runtime.observe_jax), not only declared; unsupported where nothing compiled.
        sampling="runtime_sample",
        shrinks=False,
    ),
    CheckDeclaration(
        "leak",
        f"{_CHECKS}.runtime:leak",
        "no leak",
        11,
        # No ``needs``: host memory (RSS, traced allocations) is judged on every subject; live
        # JAX arrays where JAX ran in its first call (runtime.observe_jax), declared or not.
        sampling="one_case",
        shrinks=False,
        on_user_cases=False,  # one fixed case per subject; a user's case adds nothing to it
    ),
    CheckDeclaration(
        "races",
        f"{_CHECKS}.races:races",
        "no data races (TPU interpret)",
        12,
        needs=("race_detection",),
        sampling="race_sample",  # each call runs the detector: seconds per case
        shrinks=False,
    ),
    CheckDeclaration(
        "lowers",
        f"{_CHECKS}.hardware:lowers",
        "lowers for its hardware",
        13,
        needs=("lowering",),
        sampling="lowering_cases",
        shrinks=False,  # lowering is shape-exact: the failing case is already the repro
    ),
    CheckDeclaration(
        "vmem",
        f"{_CHECKS}.hardware:vmem",
        "fits VMEM",
        14,
        needs=("tpu_lowering",),
        sampling="lowered_cases",
        shrinks=False,
    ),
    CheckDeclaration(
        "observable",
        f"{_CHECKS}.hardware:observable",
        "kernel name and cost estimate",
        16,
        needs=("tpu_lowering",),
        sampling="lowered_cases",
        shrinks=False,
    ),
    CheckDeclaration(
        "smem",
        f"{_CHECKS}.hardware:smem",
        "fits GPU shared memory",
        15,
        needs=("gpu_lowering",),
        sampling="lowered_cases",
        shrinks=False,
    ),
    CheckDeclaration(
        "config_applied",
        f"{_CHECKS}.config:config_applied",
        "config applied (traced blocks)",
        17,
        # The blocks are read from the call traced for lowering (the one lowers, vmem and
        # observable share): a subject needs tunables, and a call built for its hardware.
        needs=("tunables", "lowering"),
        sampling="config_cases",
        shrinks=False,  # the config is the case: a smaller one asks for other blocks
    ),
)

# The check whose running a case counts as covering its optional inputs' pairs
# (conformance/plan/pairwise.py): the forward output, which every subject has.
PAIRWISE_CHECK = "forward"

CHECKS: tuple[str, ...] = tuple(d.name for d in REGISTRY)
BY_NAME: dict[str, CheckDeclaration] = {d.name: d for d in REGISTRY}
REPORT_ORDER: tuple[str, ...] = tuple(d.name for d in sorted(REGISTRY, key=lambda d: d.report_rank))
LABELS: dict[str, str] = {d.name: d.label for d in REGISTRY}
# The checks that judge what the target hardware gets (they lower the call, interpreter off);
# every other verdict of an interpreted subject is the interpreter's (reports/run_report/fidelity.py).
HARDWARE_NEEDS: tuple[Need, ...] = ("lowering", "tpu_lowering", "gpu_lowering")
HARDWARE_CHECKS: tuple[str, ...] = tuple(
    d.name for d in sorted(REGISTRY, key=lambda d: d.report_rank) if set(d.needs) & set(HARDWARE_NEEDS)
)


def declaration(name: str) -> CheckDeclaration:
    """The check called ``name``; a one-line KeyError naming the checks otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no check named {name!r}; checks are {', '.join(CHECKS)}") from None


def validate(registry: Iterable[CheckDeclaration]) -> None:
    """Names and report ranks are unique (a duplicate would silently shadow a check)."""
    registry = tuple(registry)
    for field in ("name", "report_rank"):
        values = [getattr(d, field) for d in registry]
        duplicates = sorted({str(v) for v in values if values.count(v) > 1})
        if duplicates:
            raise ValueError(f"check registry: duplicate {field} {duplicates}")


validate(REGISTRY)
