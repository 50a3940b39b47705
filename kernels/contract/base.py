"""The adapter contract: how any attention implementation plugs into the suite.

An adapter *describes* one implementation (its declared capabilities, its
availability on this machine and JAX version) and *translates* canonical inputs
(``reference.spec`` layout and semantics, NumPy arrays already cast to the
subject's dtype) into the implementation's own call. Checks in ``conformance/``
consume adapters generically and never name a subject.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from kernels.contract import features as features_table
from kernels.contract.api_contract import ApiContract
from kernels.contract.dropout import DROPOUT_KINDS, DropoutKind
from kernels.contract.dtypes import (  # the one list, stdlib only so that reports reads it too
    DTYPES,
    FP8_DTYPES,
)
from kernels.contract.features import BROADCAST_DIMS
from kernels.contract.kv_storage_names import STORAGES
from kernels.contract.tunables import Config, Tunables
from reference.spec import Alignment, AttentionInputs, AttentionShape, AttentionSpec

# The hardware a kernel can be lowered for (``Capabilities.lowers_for``; kernels/hardware/lowering.py).
Platform = Literal["tpu", "cuda"]
PLATFORMS: tuple[str, ...] = ("tpu", "cuda")

FullyMaskedConvention = Literal["zeros", "mean_v", "nan", "unspecified"]

# What an implementation rounds inside (``Capabilities.internal_quantization``).
INTERNAL_QUANTIZATIONS: tuple[str, ...] = ("p_fp8",)


ConstraintBasis = Literal["raises", "api"]
CONSTRAINT_BASES: tuple[str, ...] = ("raises", "api")

# Where a ``raises`` constraint's exception comes from: the call itself (every execution,
# interpreters included), only the target hardware's compiler (the interpreter runs the case;
# Mosaic or Triton rejects it when lowering), or only the interpreter (the hardware's compiler
# takes it). See ``ShapeConstraint.stage``.
ConstraintStage = Literal["call", "lowering", "interpreter"]
CONSTRAINT_STAGES: tuple[str, ...] = ("call", "lowering", "interpreter")


@dataclasses.dataclass(frozen=True)
class ShapeConstraint:
    """A limit on shapes or options, with the sentence that explains it and its basis.

    ``holds(shape, spec)`` is True when a case satisfies the constraint. Outside it,
    the basis says why the case is not judged on its numbers:

    * ``raises``: the implementation itself rejects the call with an exception; the
      suite asserts that it does (the ``raises`` check).
    * ``api``: the call cannot express the case at all (no parameter for it); the
      reason names what is missing. The case is ``unsupported``.

    "It returns wrong or undefined numbers there" is never a basis: such cases run,
    fail, and are tracked in the known-issue ledger (docs/known-issues.md).
    ``features``: the constraint concerns only cases that use all of these
    ``Case.features`` (e.g. ``("bias",)``); empty means every case.
    ``sees_config``: ``holds`` takes a third argument, the case's tunables resolved
    (``Tunables.resolved``: every block's value, defaults filled in), for limits that
    depend on the blocks (a block must divide the length).
    ``stage`` (basis ``raises`` only): ``"call"`` when the call raises wherever it runs;
    ``"lowering"`` when only the target's compiler rejects it (an interpreter runs it). Such a
    case is asserted by the ``lowers`` check (it must fail to lower), not by ``raises``; every
    other check still judges it in the interpreter (its numbers are the kernel's math).
    ``"interpreter"`` when only the interpreter the suite runs the kernel in raises (an interpreter
    limit; the hardware's compiler takes the case): the ``raises`` check asserts it like a call-stage
    one, and the lowering checks lower the case like any other.
    ``exceptions`` (basis ``raises`` only): the names of the exception classes the implementation
    raises there (``"NotImplementedError"``), for APIs whose contract names one: the ``raises`` check
    then fails a case that raised anything else (a broadcast ``ValueError`` deep inside is a finding,
    not the declared rejection). Empty: any exception is the declared one.
    ``dtypes``: the constraint concerns only cases in these dtypes (e.g. the fp8 ones, which
    ``jax.nn`` rejects); empty means every dtype.
    """

    name: str
    reason: str
    holds: Callable[..., bool]
    basis: ConstraintBasis
    applies_to: Literal["forward", "backward", "both"] = "both"
    features: tuple[str, ...] = ()
    sees_config: bool = False
    stage: ConstraintStage = "call"
    exceptions: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown:
            raise ValueError(
                f"constraint {self.name!r}: unknown dtypes {sorted(unknown)}; choose from {DTYPES}"
            )
        if self.basis not in CONSTRAINT_BASES:
            raise ValueError(
                f"constraint {self.name!r}: basis {self.basis!r} is not one of {CONSTRAINT_BASES}; "
                "a kernel that returns wrong numbers gets a known-issue entry, not a constraint"
            )
        if self.stage not in CONSTRAINT_STAGES or (self.stage != "call" and not self.raises):
            raise ValueError(
                f"constraint {self.name!r}: stage {self.stage!r} must be one of {CONSTRAINT_STAGES}, "
                "and 'lowering' or 'interpreter' needs basis 'raises' (a compiler or an interpreter "
                "rejects the case)"
            )
        if self.exceptions and not self.raises:
            raise ValueError(
                f"constraint {self.name!r}: names exceptions {self.exceptions} but its basis is "
                f"{self.basis!r}; only a 'raises' constraint expects an exception"
            )

    def expects(self, error: BaseException) -> bool:
        """Whether ``error`` is the rejection this constraint declares: an instance of one of
        ``exceptions`` (by class name, anywhere in its class hierarchy), or any exception when
        none is named."""
        if not self.exceptions:
            return True
        return bool({cls.__name__ for cls in type(error).__mro__} & set(self.exceptions))

    @property
    def raises(self) -> bool:
        return self.basis == "raises"

    def concerns(self, features: tuple[str, ...], dtype: str = "") -> bool:
        """Whether the constraint speaks of a case with these features, in ``dtype`` ("" when
        unknown: a constraint on some dtypes only then speaks of none)."""
        in_dtype = not self.dtypes or dtype in self.dtypes
        return set(self.features) <= set(features) and in_dtype

    def satisfied(self, shape: AttentionShape, spec: AttentionSpec, blocks: dict | None = None) -> bool:
        """``holds``, given the resolved tunables when the constraint sees them."""
        return self.holds(shape, spec, blocks or {}) if self.sees_config else self.holds(shape, spec)


def compiled_where_run(constraints: Iterable[ShapeConstraint], native: bool) -> tuple[ShapeConstraint, ...]:
    """The constraints as they apply where the subject runs. On its own TPU or GPU the
    compiler runs inside the call, so what only lowering rejects (stage ``"lowering"``)
    raises at the call there (stage ``"call"``); in an interpreter it stays a lowering matter
    and the interpreter's numbers are still judged. Natively no interpreter runs, so its own limits
    (stage ``"interpreter"``) are dropped."""
    if not native:
        return tuple(constraints)
    return tuple(
        dataclasses.replace(c, stage="call") if c.stage == "lowering" else c
        for c in constraints
        if c.stage != "interpreter"
    )


@dataclasses.dataclass(frozen=True)
class Exclusion:
    """One reason a case is outside a subject's declaration (``Capabilities.admits``).

    ``text`` is the sentence recorded as the case's reason. ``constraint`` is the
    ShapeConstraint broken, or None for a capability the subject does not declare;
    ``raises`` tells the constraints the ``raises`` check asserts from api-basis ones.
    """

    text: str
    constraint: ShapeConstraint | None = None

    @property
    def raises(self) -> bool:
        return self.constraint is not None and self.constraint.raises

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an implementation declares it supports. Case generation draws only from this.

    ``causal_alignments`` are the diagonals the implementation can place; they
    apply to causal masks and to windows alike (``docs/semantics.md``).
    """

    dtypes: tuple[str, ...]
    causal_alignments: tuple[Alignment, ...] = ()
    window: bool = False
    # The alignments at which the implementation places a chunked causal mask (``chunk``,
    # docs/semantics.md): a subset of ``causal_alignments``; empty: no chunked mask.
    chunked_causal_alignments: tuple[Alignment, ...] = ()
    segment_ids: bool = False
    lengths: bool = False
    # With ``lengths``: query lengths too. Decode kernels take kv lengths only (one query per row).
    q_lengths: bool = True
    bool_mask: bool = False
    gqa: bool = False
    bias: bool = False
    bias_broadcast: bool = False
    # With bias_broadcast: the dims a bias (or a boolean mask, which jax.nn folds into the bias)
    # may hold as 1; cuDNN takes (Sq, Sk) whole and broadcasts over batch and heads only.
    broadcast_dims: tuple[str, ...] = BROADCAST_DIMS
    softcap: bool = False
    # What a -inf bias entry becomes under softcap (docs/semantics.md): "masks" (canonical: the key
    # is masked, as with no softcap) or "caps" (the cap is applied to ``logits + bias`` as is, so
    # -inf becomes -softcap and the key keeps a weight: tokamax's documented order). A subject
    # that declares "caps" gets -inf bias cases with softcap as unsupported, with the reason.
    softcap_neg_inf_bias: Literal["masks", "caps"] = "masks"
    # Attention sinks (one logit per query head in the denominator, docs/semantics.md);
    # sinks_grad: the backward pass returns d(sinks) too (otherwise it is not observed).
    sinks: bool = False
    sinks_grad: bool = False
    distinct_v_dim: bool = False
    # The call takes leading batch dims (``AttentionSpec.batch_dims``): q, k, v as ``[*batch_dims, ...]``,
    # per-batch lengths shaped ``batch_dims``, a bias or mask's batch axis likewise, as the API documents
    # (tokamax: ``"*B T N H"``, lengths ``"*#B"``). Declared only where it is documented.
    leading_batch_dims: bool = False
    backward: bool = False
    bias_grad: bool = False
    lse: bool = False
    # The call writes the case's new keys and values into a KV cache and returns it
    # (``SubjectOutput.kv_cache``): the ``kv_cache`` check compares it with the cache expected.
    kv_cache: bool = False
    fully_masked_rows: FullyMaskedConvention = "unspecified"
    constraints: tuple[ShapeConstraint, ...] = ()
    # The implementation runs on JAX in this process, so its compilations and live arrays
    # can be observed. Unset, the recompile and leak checks observe it anyway (JAX's events on
    # a first call with JAX's caches cleared) and the report flags the missing declaration.
    jax_runtime: bool = False
    # The kernels run under Pallas TPU interpret mode with a race detector the suite can switch
    # on (kernels/runtime/tpu_interpret.py: race_detection_declared); the races check needs it.
    race_detection: bool = False
    # Parameters a user may tune (block sizes, ...) and their legal space; a case's config
    # names values for some of them (kernels/contract/tunables.py). Empty: nothing to tune.
    tunables: Tunables = Tunables()
    # What the implementation rounds inside, beyond its inputs, in fp8 cases (the baseline follows
    # it: conformance/judge/baseline.py). None: every intermediate stays float32 (matmuls
    # accumulate there). "p_fp8": P, the softmax weights, is rounded to V's fp8 dtype before the
    # matmuls it feeds (P V forward, P^T dO backward), as ``p.astype(v.dtype)`` in a kernel does.
    # In the other dtypes the baseline rounds every intermediate to the dtype anyway. (Kernels
    # that also round ds * scale to fp8 before the dq/dk matmuls, as Pallas TPU flash and Pallas
    # GPU do, need no declaration: that costs 1.0 to 2.3x the baseline's dq/dk error, whose
    # final fp8 rounding dominates; docs/tolerances.md.)
    internal_quantization: str | None = None
    # The API takes no softmax scale: the caller passes ``q * scale``, rounded to q's dtype, and
    # every caller must (e.g. splash). The baseline pre-scales its q the same way, in
    # every dtype, so the rounding the API imposes on its callers (3 mantissa bits in e4m3fn) is
    # the yardstick's too, and only what the kernel adds to it is judged.
    q_prescaled: bool = False
    # The dtype each output (out; lse may also be float32/64) comes back in, per input dtype,
    # where it is not the input's: e.g. (("float8_e4m3fn", "bfloat16"),) for an fp8 kernel that
    # writes bf16. The shape_dtype check expects it and the baseline rounds its out to it.
    output_dtypes: tuple[tuple[str, str], ...] = ()
    # How the implementation stores K/V when narrower than the dtype (kernels/runtime/kv_storage.py,
    # e.g. "int8" per token, "int8_per_channel", "float8_e4m3fn_per_head"): every case of it
    # carries this storage and its K/V are rounded to it, so the reference sees exactly the
    # values the implementation computes with. None: the dtype.
    kv_storage: str | None = None
    # The storages the call accepts, case by case, for q and for K and V (the same names): a
    # case may pass the tensor quantized, its weights and scales (``Case.q_storage``,
    # ``Case.kv_storage``; drawn, paired and curated like any optional input), or plain. A
    # fixed ``kv_storage`` is the one K/V storage (``kv_storages`` becomes it).
    q_storages: tuple[str, ...] = ()
    kv_storages: tuple[str, ...] = ()
    # The hardware the kernel is written for, when the adapter can lower its call for it with
    # the interpreter off (``Adapter.lowering``; kernels/hardware/lowering.py): "tpu" (Mosaic) or "cuda"
    # (Triton). The lowers, vmem and observable checks need it. None: nothing to lower.
    lowers_for: str | None = None
    # How the API takes attention dropout (kernels/contract/dropout.py): "mask" (the caller's
    # boolean mask and the rate), "key" (the rate and a PRNG key: the kernel draws the mask), or ""
    # (no dropout parameter: the dropout check is unsupported). An implementation of a family that
    # rejects it declares a ShapeConstraint with features ("dropout",), basis raises.
    dropout: DropoutKind = ""
    # What the API documents about choosing among its implementations (a fallback list, a default)
    # and about its ``precision`` and ``logits_dtype`` arguments (kernels/contract/api_contract.py);
    # the ``api_contract`` check judges each promise. None: the API makes none of them.
    api_contract: ApiContract | None = None

    def __post_init__(self) -> None:
        if self.dropout not in DROPOUT_KINDS:
            raise ValueError(f"unknown dropout {self.dropout!r}; choose from {DROPOUT_KINDS}")
        if self.lowers_for is not None and self.lowers_for not in PLATFORMS:
            raise ValueError(f"unknown lowers_for {self.lowers_for!r}; choose from {PLATFORMS} (or None)")
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown:
            raise ValueError(f"unknown dtypes {sorted(unknown)}; choose from {DTYPES}")
        if set(self.chunked_causal_alignments) - set(self.causal_alignments):
            raise ValueError(
                f"chunked_causal_alignments {self.chunked_causal_alignments} must be among "
                f"causal_alignments {self.causal_alignments}: a chunked mask is causal"
            )
        if self.kv_storage is not None and self.kv_storage not in STORAGES:
            raise ValueError(f"unknown kv_storage {self.kv_storage!r}; choose from {STORAGES} (or None)")
        for name in ("q_storages", "kv_storages"):
            unknown = [s for s in getattr(self, name) if s not in STORAGES]
            if unknown:
                raise ValueError(f"unknown {name} {unknown}; choose from {STORAGES}")
        if self.kv_storage is not None:
            if self.kv_storages not in ((), (self.kv_storage,)):
                raise ValueError(
                    f"kv_storage {self.kv_storage!r} fixes every case's K/V storage; "
                    f"leave kv_storages {self.kv_storages} empty (or name it alone)"
                )
            object.__setattr__(self, "kv_storages", (self.kv_storage,))
        if (
            self.internal_quantization is not None
            and self.internal_quantization not in INTERNAL_QUANTIZATIONS
        ):
            raise ValueError(
                f"unknown internal_quantization {self.internal_quantization!r}; "
                f"choose from {INTERNAL_QUANTIZATIONS} (or None: everything inside in float32)"
            )
        if self.internal_quantization is not None and not set(FP8_DTYPES) & set(self.dtypes):
            raise ValueError(
                f"internal_quantization {self.internal_quantization!r} concerns fp8 cases only; "
                f"declare an fp8 dtype {FP8_DTYPES} or leave it None"
            )
        pairs = dict(self.output_dtypes)
        if (
            len(pairs) != len(self.output_dtypes)
            or set(pairs) - set(self.dtypes)
            or set(pairs.values()) - set(DTYPES)
        ):
            raise ValueError(
                f"output_dtypes {self.output_dtypes!r} must pair each declared input dtype {self.dtypes} "
                f"(at most once) with an output dtype from {DTYPES}, e.g. (('float8_e4m3fn', 'bfloat16'),)"
            )

    def output_dtype(self, dtype: str) -> str:
        """The dtype of ``out`` for inputs in ``dtype``: the declared one, else the input's."""
        return dict(self.output_dtypes).get(dtype, dtype)

    @property
    def lowering(self) -> bool:
        """The call can be lowered for its target hardware (the ``lowers`` check's need)."""
        return self.lowers_for is not None

    @property
    def gpu_lowering(self) -> bool:
        """The call lowers to Triton kernels for CUDA: their shared memory can be estimated (``smem``)."""
        return self.lowers_for == "cuda"

    @property
    def tpu_lowering(self) -> bool:
        """The call lowers to Mosaic TPU kernels: VMEM and cost estimates exist (``vmem``, ``observable``)."""
        return self.lowers_for == "tpu"

    def admits(
        self,
        shape_or_inputs: AttentionShape | AttentionInputs,
        spec: AttentionSpec,
        dtype: str,
        direction: Literal["forward", "backward"],
        features: tuple[str, ...] = (),
        config: Config = (),
    ) -> tuple[Exclusion, ...]:
        """Every reason a case is outside what this declares; empty when it is inside.

        The one predicate for "is this case inside the declaration?" (in the spirit of
        xformers' ``not_supported_reasons``). Order: declared capabilities (dtype, masks,
        options, in a fixed order), then "backward pass not declared" for a backward
        call, then the shape constraints of ``direction`` (``Exclusion.constraint`` set;
        ``Exclusion.raises`` for basis ``raises``). ``features`` are the case's
        (``Case.features``), for constraints that concern some features only. ``config``
        is the case's (``Case.config``): a config outside the declared tunables is a
        declared-capability exclusion; the constraints see its resolved values.

        ``shape_or_inputs``: inputs (real, or a skeleton such as ``Case.skeleton()``) are
        judged fully; a bare shape cannot show segment ids, lengths, a mask or a bias, so
        those are taken as absent.
        """
        if isinstance(shape_or_inputs, AttentionInputs):
            inputs: AttentionInputs | None = shape_or_inputs
            shape = shape_or_inputs.shape
        else:
            inputs, shape = None, shape_or_inputs
        checks = [
            (dtype not in self.dtypes, f"dtype {dtype} not in {self.dtypes}"),
            *((True, text) for text in features_table.refusals(self, shape, spec, inputs)),
            (direction == "backward" and not self.backward, "backward pass not declared"),
        ]
        declared = [Exclusion(text) for failed, text in checks if failed]
        illegal = self.tunables.problems(config) if config else ()
        declared += [Exclusion(f"config: {problem}") for problem in illegal]
        blocks = self.tunables.resolved(config) if not illegal else {}
        constraints = [
            Exclusion(f"{c.name}: {c.reason}", c)
            for c in self.constraints
            if c.applies_to in (direction, "both")
            and c.concerns(features, dtype)
            and not (illegal and c.sees_config)
            and not c.satisfied(shape, spec, blocks)
        ]
        return (*declared, *constraints)

    def unsupported_reason(self, inputs: AttentionInputs, spec: AttentionSpec, dtype: str) -> str | None:
        """The first declared capability this case lacks, or None: ``admits`` without its
        shape constraints (kept for callers that ask only that)."""
        return next(
            (e.text for e in self.admits(inputs, spec, dtype, "forward") if e.constraint is None), None
        )

    def violated_constraints(
        self,
        shape: AttentionShape,
        spec: AttentionSpec,
        direction: Literal["forward", "backward"],
        features: tuple[str, ...] = (),
    ) -> tuple[ShapeConstraint, ...]:
        """The constraints a case breaks: ``admits``'s constraint part (kept for callers that ask
        only that); ``features`` are the case's (``Case.features``)."""
        return tuple(
            e.constraint
            for e in self.admits(shape, spec, "", direction, features)  # the dtype's answer is dropped
            if e.constraint is not None
        )


Execution = Literal["native", "interpret"]
EXECUTIONS: tuple[str, ...] = ("native", "interpret")


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether the subject can run here, and if not, why (one sentence).

    ``execution``: ``"interpret"`` when an interpreter runs the kernel (e.g. Pallas's,
    on CPU), else ``"native"``; benchmarks pair on it (interpret-mode timings describe
    the interpreter, not the kernel). ``execution_detail``: how, in words, e.g.
    ``"Pallas TPU interpret mode (force_tpu_interpret_mode) on CPU"``.
    """

    available: bool
    reason: str = ""
    versions: tuple[tuple[str, str], ...] = ()  # e.g. (("jax", "0.10.2"),)
    execution: Execution = "native"
    execution_detail: str = ""
    # Unavailable, yet its call lowers for its target here (``Capabilities.lowers_for``): the
    # checks that only lower (lowers, vmem, observable) still run; the others are unavailable.
    lowerable: bool = False

    def __post_init__(self) -> None:
        if self.execution not in EXECUTIONS:
            raise ValueError(
                f"Availability.execution is {self.execution!r}; use one of {EXECUTIONS} "
                "and put the sentence in execution_detail"
            )


@dataclasses.dataclass(frozen=True, eq=False)
class SubjectOutput:
    """What one forward call returned, converted to NumPy.

    out: [B, Hq, Sq, Dv]; lse: [B, Hq, Sq] or None when not exposed.
    ran: what actually executed (e.g. "pallas_call"), so a silent fallback shows.
    """

    out: np.ndarray
    lse: np.ndarray | None = None
    ran: str = ""
    kv_cache: CacheWrite | None = None  # where Capabilities.kv_cache


@dataclasses.dataclass(frozen=True, eq=False)
class CacheWrite:
    """The KV cache a call returned beside the one it should return, in the subject's own layout
    (``[pages, page_size, ...]``): ``expected`` is the cache the call was given with each new
    token's K and V in its own slot and every other element as it was. A write-back copies, so
    the two are compared bitwise."""

    returned: np.ndarray
    expected: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class SubjectGrads:
    """Gradients of sum(out * dout), converted to NumPy, in canonical layout.
    dsinks: [Hq] where ``Capabilities.sinks_grad`` (summed over batch and query rows)."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dbias: np.ndarray | None = None
    dsinks: np.ndarray | None = None


@runtime_checkable
class Adapter(Protocol):
    """One implementation under test. Instances may cache compiled functions."""

    name: str
    description: str

    def availability(self) -> Availability: ...

    def capabilities(self) -> Capabilities: ...

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """Canonical inputs (already in the subject's dtype) -> canonical outputs."""
        ...

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Only called when ``capabilities().backward`` is True."""
        ...

    # Optional members (``OPTIONS``, ``FAMILY_OPTION``, ``configured``, ``standalone``, ``lowering``,
    # ``jax_call``), their signatures and what their absence means are declared once, in
    # kernels/contract/optional_members.py; read them with ``optional_member(adapter, name)``. They
    # are not members of this Protocol: isinstance(x, Adapter) would then require them.
