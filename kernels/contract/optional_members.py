"""The members an adapter may leave out, each with what its absence means, in one place.

The ``Adapter`` protocol (``kernels/contract/base.py``) requires ``name``, ``description``,
``availability``, ``capabilities``, ``forward`` and ``gradients``. The members below are optional:
every reader asks ``optional_member(adapter, name)``, so an absent member reads as the default
written here and nowhere else.
"""

from __future__ import annotations

import types
from typing import Any

OPTIONAL_MEMBERS: types.MappingProxyType[str, Any] = types.MappingProxyType(
    {
        # Option -> its legal values: the variants ``NAME[key=value]`` (kernels/contract/subject_spec.py;
        # a built-in's are declared in kernels/subjects.py too). Absent: no options.
        "OPTIONS": types.MappingProxyType({}),
        # The option ``--impl NAME`` expands over, one subject per value (a family). Absent: none.
        "FAMILY_OPTION": None,
        # ``configured(config)``: a copy that calls the kernel with those tunables; needed by an
        # adapter that declares ``Capabilities.tunables``; an adapter dataclass with a ``config``
        # field gets it from ``kernels.contract.tunables.Configurable``.
        "configured": None,
        # ``standalone(inputs, spec) -> kernels.runtime.standalone.StandaloneCall``: the call as
        # module-level functions, for self-contained repro scripts (a JAX adapter's rendered from
        # its call description, kernels/runtime/call_description.py). Absent: no standalone script.
        "standalone": None,
        # ``lowering(inputs, spec, direction) -> kernels.hardware.lowering.LoweringCall``: the
        # forward or backward call built for its hardware with the interpreter off; needed by an
        # adapter that declares ``Capabilities.lowers_for``.
        "lowering": None,
        # ``jax_call(inputs, spec, dout=None) -> kernels.runtime.jax_runtime.JaxCall``: the forward
        # (dout None) or gradients call as JAX arrays and a function of them, which the ``vmap``
        # and ``sharded`` checks transform. Absent: both are unsupported; NotImplementedError for a
        # case it cannot state: both unsupported with its message (conformance/judge/checks/jax_calls.py).
        "jax_call": None,
        # ``dropout(inputs, spec, request, dout=None) -> SubjectOutput | SubjectGrads``: the forward
        # (dout None) or gradients call with attention dropout (``kernels.contract.dropout.DropoutRequest``:
        # the rate, and the keep mask or a seed, as ``Capabilities.dropout`` says). Absent: the
        # dropout check is unsupported.
        "dropout": None,
        # ``contract_call(inputs, spec, request) -> SubjectOutput``: the forward call with the
        # implementation argument, precision and logits dtype the request
        # (``kernels.contract.api_contract.ContractCall``) asks for. Absent: the api_contract check is
        # unsupported.
        "contract_call": None,
    }
)


def optional_member(adapter: Any, name: str) -> Any:
    """``adapter``'s (or adapter class's) optional member ``name``, or its default when absent."""
    if name not in OPTIONAL_MEMBERS:
        raise KeyError(f"{name!r} is not an optional Adapter member; use one of {tuple(OPTIONAL_MEMBERS)}")
    return getattr(adapter, name, OPTIONAL_MEMBERS[name])
