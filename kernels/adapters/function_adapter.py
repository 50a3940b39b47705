"""Plugging in a plain function: the canonical signature and the adapter that wraps it.

A function reached by dotted path (``--impl package.module:function``) needs no
adapter code. It must look like this::

    def attention(q, k, v, *, scale, causal=False, alignment="top_left", window=None,
                  softcap=None, bias=None, mask=None, q_segment_ids=None,
                  kv_segment_ids=None, q_lengths=None, kv_lengths=None, sinks=None):
        ...
        return out            # or (out, lse)

* ``q: [B, Hq, Sq, D]``, ``k: [B, Hkv, Sk, D]``, ``v: [B, Hkv, Sk, Dv]``: NumPy arrays in
  the canonical layout, already in the subject's dtype.
* Keywords mean exactly what ``reference.spec.AttentionSpec`` and ``AttentionInputs``
  say (``docs/semantics.md``). ``scale`` always arrives resolved (a float, never None);
  every other keyword is passed only when the case uses it, so a function need only
  accept the keywords of the features it declares (or ``**kwargs``).
* ``sinks: [Hq]`` (when declared): one logit per query head in the softmax denominator.
* Returns ``out: [B, Hq, Sq, Dv]`` (array-like), or ``(out, lse)`` with ``lse: [B, Hq, Sq]``
  when it declares ``lse=True``.
* Leading batch dims (``leading_batch_dims=True``; no keyword, as GQA needs none: the shapes say it):
  a case with ``batch_dims``, e.g. ``(2, 3)``, passes q, k, v as ``[2, 3, H, S, D]``, its lengths as
  ``[2, 3]``, segment ids as ``[2, 3, S]``, a bias or mask's batch axis as ``2, 3`` (a broadcast one as
  ``1, 1``), the batch flattened row-major; out and lse come back with the same leading dims.

Capabilities are declared on the function itself::

    attention.attention_capabilities = Capabilities(dtypes=("float32", "bfloat16"),
                                                    causal_alignments=("top_left",))

An fp8 function (``dtypes=("float8_e4m3fn", "float8_e5m2")``: its inputs arrive as
``ml_dtypes`` arrays) also declares what it rounds inside (``internal_quantization="p_fp8"``
when it rounds P to fp8 before the PV matmul) and, where out is not in the input dtype, that
dtype (``output_dtypes=(("float8_e4m3fn", "bfloat16"), ...)``): the baseline follows both
(``tests/mutants/fp8.py`` is an example).

Without that attribute the conservative ``DEFAULT_CAPABILITIES`` apply: float32,
no masks, no bias, no GQA, forward only. A function built on JAX declares
``jax_runtime=True``; one that does not is still watched: ``leak`` judges its host memory, and
where JAX compiles during its first call, ``recompile`` and ``leak``'s live-array count run too
and the report flags the missing declaration (``conformance/judge/checks/runtime.py``).
Functions are forward-only (``backward`` must stay False); gradients need an adapter of
your own (see ``kernels.registry``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.contract import features
from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.runtime.leading_batch import with_leading, without_leading
from kernels.runtime.standalone import StandaloneCall, source_of
from reference.spec import AttentionInputs, AttentionSpec

CAPABILITIES_ATTRIBUTE = "attention_capabilities"
DEFAULT_CAPABILITIES = Capabilities(dtypes=("float32",))


class PluginSignatureError(TypeError):
    """A plug-in function whose signature or declaration does not fit the canonical one."""


def required_keywords(capabilities: Capabilities) -> tuple[str, ...]:
    """The keywords a function must accept to support what ``capabilities`` declares."""
    return ("scale", *features.accepted_keywords(capabilities))


def check_signature(fn: Callable[..., Any], capabilities: Capabilities, where: str) -> None:
    """Raise PluginSignatureError (naming the fix) unless ``fn`` can be called canonically."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError) as error:
        raise PluginSignatureError(f"{where}: cannot read the signature of {fn!r} ({error})") from None
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind == kinds.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind == kinds.VAR_KEYWORD for p in params)
    if len(positional) < 3 and not var_positional:
        raise PluginSignatureError(
            f"{where}: takes {len(positional)} positional parameters; the canonical signature is "
            f"fn(q, k, v, *, scale, ...) (see kernels/adapters/function_adapter.py)"
        )
    accepted = {p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}
    missing = [n for n in required_keywords(capabilities) if n not in accepted and not var_keyword]
    if missing:
        raise PluginSignatureError(
            f"{where}: does not accept keyword(s) {missing} that its capabilities imply; "
            f"add them (or **kwargs) to its signature"
        )
    extra = [
        p.name
        for p in list(params)[3:]
        if p.default is inspect.Parameter.empty
        and p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
        and p.name not in required_keywords(capabilities)
    ]
    if extra:
        raise PluginSignatureError(
            f"{where}: required parameter(s) {extra} are never passed; give them defaults"
        )


def declared_capabilities(fn: Callable[..., Any], where: str) -> Capabilities:
    """``fn.attention_capabilities``, or ``DEFAULT_CAPABILITIES`` when the function declares none."""
    declared = getattr(fn, CAPABILITIES_ATTRIBUTE, DEFAULT_CAPABILITIES)
    if not isinstance(declared, Capabilities):
        raise PluginSignatureError(
            f"{where}: {CAPABILITIES_ATTRIBUTE} must be a kernels.contract.base.Capabilities, "
            f"got {type(declared).__name__}"
        )
    if declared.backward or any(getattr(declared, g.declared_by) for g in features.gradients()):
        raise PluginSignatureError(
            f"{where}: plain functions are forward-only; set backward=False, or write an adapter "
            f"with gradients() and register it in the 'attention_conformance.adapters' entry-point group"
        )
    return declared


def canonical_keywords(inputs: AttentionInputs, spec: AttentionSpec) -> dict[str, Any]:
    """The keywords for one case: ``scale`` always, every other one only when the case uses it."""
    return {"scale": spec.resolved_scale(inputs.q.shape[-1]), **features.call_keywords(inputs, spec)}


def call_arguments(inputs: AttentionInputs, spec: AttentionSpec) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(q, k, v)`` and the keywords as the function receives them: ``canonical_keywords``, and with
    ``spec.batch_dims`` every batch-first array (q, k, v, ``features.batch_inputs()``) reshaped to
    those leading dims (``kernels/runtime/leading_batch.py``)."""
    dims = spec.batch_dims
    keywords = canonical_keywords(inputs, spec)
    batched = set(features.batch_inputs())
    keywords = {name: with_leading(x, dims) if name in batched else x for name, x in keywords.items()}
    return tuple(with_leading(x, dims) for x in (inputs.q, inputs.k, inputs.v)), keywords


@dataclasses.dataclass(frozen=True, eq=False)
class FunctionAdapter:
    """Adapter around a function with the canonical signature (module docstring)."""

    fn: Callable[..., Any]
    name: str
    description: str
    declared: Capabilities

    @classmethod
    def wrap(cls, fn: Callable[..., Any], name: str) -> FunctionAdapter:
        """Check ``fn`` and its declaration; raise PluginSignatureError with the fix if they do not fit."""
        capabilities = declared_capabilities(fn, name)
        check_signature(fn, capabilities, name)
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        description = doc[0] if doc else f"user function {name}"
        return cls(fn=fn, name=name, description=description, declared=capabilities)

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "user function, called in this process")

    def capabilities(self) -> Capabilities:
        return self.declared

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """Calls ``fn(q, k, v, **keywords)`` (``call_arguments``); ``out`` keeps the dtype the function
        returned, flattened back to ``[B, ...]`` from the case's leading batch dims."""
        arrays, keywords = call_arguments(inputs, spec)
        result = self.fn(*arrays, **keywords)
        flat = lambda x: without_leading(np.asarray(x), spec.batch_dims)  # noqa: E731
        if isinstance(result, tuple):
            if len(result) != 2:
                raise PluginSignatureError(
                    f"{self.name}: returned a {len(result)}-tuple; return out or (out, lse)"
                )
            out, lse = result
            lse = None if lse is None else flat(lse)
            return SubjectOutput(out=flat(out), lse=lse, ran=self.name)
        if self.declared.lse:
            raise PluginSignatureError(
                f"{self.name}: declares lse=True but returned only out; return (out, lse)"
            )
        return SubjectOutput(out=flat(result), ran=self.name)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """The call ``forward`` makes, as standalone script text (``kernels.runtime.standalone``): the
        user's own import line, and the keywords ``canonical_keywords`` passes for this case
        (``inputs`` may be a skeleton: only which arrays are set matters)."""
        module, _, attribute = self.name.partition(":")
        if not attribute:  # wrapped directly, not by dotted path: name it by where it lives
            module, attribute = self.fn.__module__, self.fn.__qualname__
        dims = spec.batch_dims
        batched = set(features.batch_inputs())
        # with leading batch dims, each batch-first array goes through with_leading (as call_arguments)
        lead = (lambda name: name) if dims is None else (lambda name: f"with_leading({name}, {dims!r})")

        def written(name: str, value: Any) -> str:
            if not isinstance(value, np.ndarray):
                return repr(value)
            return lead(name) if name in batched else name

        keywords = ", ".join(
            f"{name}={written(name, value)}" for name, value in canonical_keywords(inputs, spec).items()
        )
        flat = "np.asarray" if dims is None else f"(lambda x: without_leading(np.asarray(x), {dims!r}))"
        root, _, rest = attribute.partition(".")
        return StandaloneCall(
            imports=(f"from {module} import {root}",),
            definitions=() if dims is None else source_of(with_leading, without_leading),
            setup=f"attention = {attribute}  # the function --impl named\n"
            if rest or root != "attention"
            else "",
            forward=(
                f"result = attention({lead('q')}, {lead('k')}, {lead('v')}, {keywords})\n"
                "out, lse = result if isinstance(result, tuple) else (result, None)  # out, or (out, lse)\n"
                f"out, lse = {flat}(out), None if lse is None else {flat}(lse)\n"
            ),
            note=f"the user function {module}:{attribute}, called with NumPy arrays",
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError(f"{self.name} is a plain function: forward only (backward=False)")
