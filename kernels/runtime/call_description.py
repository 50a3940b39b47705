"""An adapter's call, described once: what the suite runs and what a standalone repro script writes.

A ``CallDescription`` says which module-level function the adapter calls (JAX and NumPy only, as
the adapter's translation always is), what it is bound to before its arrays (the kernel module,
values built from the case such as a page layout or a list of kernels), its static keywords, the
arrays it is traced on, what it returns, and the context it runs in (TPU interpret mode). From it:

* ``static_function`` and ``traced_arguments`` give the function the adapter jits and the arrays
  it jits it on (``kernels.runtime.jax_runtime.JaxCall``), and ``cache_key`` what that function
  depends on, by value: one compile serves every equal call (``CompiledCache.run``);
* ``standalone`` writes the same call as script text (``kernels.runtime.standalone.StandaloneCall``):
  the import lines, the embedded functions (the call's own and every module-level function,
  constant and import they reach), the statements that make the bound values, and one call per
  direction with its printout names.

So a script cannot call anything the suite did not: both read the one description. Choices the
suite makes for the machine it runs on (native or interpreted) are ``Decided`` values, ``Module``
loads and a ``Context``, whose script form re-decides them where the script runs, by the same rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import enum
import functools
import inspect
import types
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from kernels.runtime.jax_runtime import JaxCall, jax_version, to_jax
from kernels.runtime.standalone import StandaloneCall, source_of
from kernels.runtime.tpu_interpret import (
    INT_INDEXER_SHIM_BEFORE,
    Interpreter,
    choose_execution,
    interpret_params,
    standalone_shim,
    tpu_interpret_mode_missing,
)
from reference.spec import AttentionInputs

# A script's shape constants (conformance/judge/standalone.py's case block) and where they come
# from in the suite's inputs.
SHAPE_NAMES = {
    "B": lambda s: s.batch,
    "HQ": lambda s: s.q_heads,
    "HKV": lambda s: s.kv_heads,
    "SQ": lambda s: s.q_len,
    "SK": lambda s: s.kv_len,
    "D": lambda s: s.head_dim,
    "DV": lambda s: s.v_head_dim,
}
LENGTHS = ("q_lengths", "kv_lengths")  # int32 in the script's draws and in every call
# Where each canonical input keeps its heads (docs/semantics.md's layouts: [B, H, S, D], a bias or
# mask [B|1, H|1, Sq, Sk], sinks [Hq]): what ``jax.vmap`` along heads splits. Segment ids and
# lengths have none.
HEAD_AXES = {"q": 1, "k": 1, "v": 1, "dout": 1, "bias": 1, "mask": 1, "sinks": 0}
UNDECLARED = "undeclared"  # Built.head_axis: the builder did not say where its array's heads are
FORWARD_OUTPUTS = ("out", "lse")
GRADIENT_OUTPUTS = ("dq", "dk", "dv", "dbias")
# Where an embedded function may come from: the suite's own pure translation code.
EMBEDDABLE_PACKAGES = ("kernels.", "reference.")
LINE = 100  # a call longer than this is written one keyword a line


@dataclasses.dataclass(frozen=True)
class Name:
    """A script variable the case defines: an input array (``q`` ... ``sinks``, ``dout``), a shape
    constant (``SHAPE_NAMES``), or an attribute path of one (``k.shape``)."""

    name: str


@dataclasses.dataclass(frozen=True)
class Decided:
    """A value the suite decided for this machine (``value``, e.g. ``interpret=True`` off a GPU) that
    the script decides where it runs by the same rule (``expression``, e.g.
    ``jax.default_backend() != 'gpu'``)."""

    value: Any
    expression: str


def off_chip(platform: str) -> Decided:
    """Whether JAX runs on another platform than ``platform`` (``"gpu"``, ``"tpu"``): a kernel's
    ``interpret=`` here and where the script runs."""
    from kernels.runtime.jax_runtime import default_backend

    return Decided(default_backend() != platform, f"jax.default_backend() != {platform!r}")


@dataclasses.dataclass(frozen=True)
class Module:
    """A module (or one ``attribute`` of it) the call is bound to: ``value`` here; in the script
    ``name = importlib.import_module(path)[.attribute]``. ``interpreted_off_tpu``: off a TPU the
    adapter runs a private copy whose ``pallas_call`` interprets (``tpu_interpret.interpreted_copy``),
    and the script loads the same copy (the shim embedded) unless it runs on a TPU."""

    name: str
    path: str
    value: Any
    attribute: str = ""
    interpreted_off_tpu: bool = False


@dataclasses.dataclass(frozen=True)
class Member:
    """A member of an enum a ``Module`` loads (``QKVLayout.HEAD_DIM_MINOR``): ``enum.name`` and the
    member's name in the script."""

    enum: Module
    name: str


@dataclasses.dataclass(frozen=True)
class Built:
    """A value made from the case before the call, ``name = function(*args, **keywords)``: a page
    layout, a mask's planes, the kernels of one direction, a library's Config. ``function`` is
    module-level (embedded in the script) or a ``Module`` (a library's callable, e.g. a Config
    class, which the script imports); each argument is a literal or a node of this module.
    ``in_context``: built inside the call's ``Context`` (kernels built under TPU interpret mode).
    ``comment``: a few words the script shows beside it. Unnamed (``name=""``), it is written
    inline where it is used."""

    name: str
    function: Callable[..., Any] | Module
    args: tuple[Any, ...] = ()
    keywords: tuple[tuple[str, Any], ...] = ()
    in_context: bool = False
    comment: str = ""
    # Where the array it makes keeps its heads, for ``jax.vmap`` along heads (``head_axes``): an
    # axis, None for an array without heads, or UNDECLARED (a page layout: the builder's own).
    head_axis: int | None | str = UNDECLARED
    # ``cache_key`` reads it by the value it makes, not by its arguments: a small hashable value
    # the call compiles in but reads from the arrays (quantized pages' scales), so that equal
    # values share one compile and the arrays' bytes stay out of the key.
    keyed_by_value: bool = False


@dataclasses.dataclass(frozen=True)
class Star:
    """``*node`` among the traced arrays: a Built that returns several arrays (a page layout).
    ``head_axes``: where each of them keeps its heads (``head_axes``), where the builder says so."""

    node: Any
    head_axes: tuple[int | None, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Context:
    """What the call is traced and run inside: ``enter()`` here; in the script ``expression`` (empty:
    nothing), with the import lines it needs and the module-level ``functions`` it calls (embedded
    like a ``Built``'s)."""

    enter: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    expression: str = ""
    imports: tuple[str, ...] = ()
    functions: tuple[Callable[..., Any], ...] = ()


NO_CONTEXT = Context()


def tpu_interpret_context(interpreter: Interpreter, cores: int = 1) -> Context:
    """The context of a Pallas TPU call with ``interpreter`` (``tpu_interpret.choose_execution``):
    here natively on a TPU, else that interpreter (``cores`` simulated TensorCores in TPU interpret
    mode); in the script, for ``"tpu"``, natively on a TPU and TPU interpret mode elsewhere (the
    generic interpreter is the module's or the kernel's ``interpret=``, no context)."""
    enter = functools.partial(choose_execution(interpreter).context, cores=cores)  # keyed by value
    if interpreter != "tpu":
        return Context(enter)
    params = interpret_params(cores) if tpu_interpret_mode_missing() is None else {}
    written = f"**{params!r}" if params else ""
    expression = (
        "(contextlib.nullcontext() if jax.default_backend() == 'tpu' "
        f"else pltpu.force_tpu_interpret_mode(pltpu.InterpretParams({written})))"
    )
    return Context(enter, expression, ("from jax.experimental.pallas import tpu as pltpu",))


def constructed(name: str, value: Any, class_name: str) -> Built:
    """``value``, a dataclass instance of a library (a kernel's Config), as the call of its class
    with every field it takes: ``name = class_name(field=value, ...)``, an enum field as its member
    (``Member``). The suite makes its value by that same call, so the script passes what the suite
    passed; ValueError where the call does not rebuild ``value`` (a field its constructor does not
    take, or one it changes), TypeError for a field neither a literal nor an enum member."""
    cls = type(value)
    keywords = tuple(
        (field.name, _field_node(getattr(value, field.name)))
        for field in dataclasses.fields(value)
        if field.init
    )
    node = Built(name, Module(class_name, cls.__module__, cls, attribute=cls.__qualname__), (), keywords)
    if _Scope(None, None).value(node) != value:  # type: ignore[arg-type]
        raise ValueError(f"{cls.__qualname__}(**its fields) does not rebuild {value!r}")
    return node


def _field_node(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        kind = type(value)
        return Member(Module(kind.__name__, kind.__module__, kind, attribute=kind.__qualname__), value.name)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a {type(value).__name__} field has no script form: {value!r}")


@dataclasses.dataclass(frozen=True)
class CallDescription:
    """One direction's call: ``function(*bound, *arrays, **keywords)`` inside ``context``.

    function: module-level, JAX and NumPy only: it returns the canonical outputs (``outputs``:
        ``("out", "lse")`` forward, lse None where none; or the gradients, e.g. ``("dq", "dk", "dv",
        "dbias")``, a name missing there is None in the script);
    bound: positional arguments before the arrays (``Module``, ``Built``, literals), static;
    arrays: the arrays it is traced on, in order (``Name``, ``Built``, ``Star``), NumPy here and
        ``jnp.asarray`` of them in the call;
    keywords: static keywords (literals, ``Decided``, ``Built``, ``Module``);
    note: what runs, in words (the script's header);
    prepare: calls made first for their effect (unnamed ``Built``: a library's flags marked parsed).
    """

    function: Callable[..., Any]
    arrays: tuple[Any, ...]
    bound: tuple[Any, ...] = ()
    keywords: tuple[tuple[str, Any], ...] = ()
    outputs: tuple[str, ...] = FORWARD_OUTPUTS
    context: Context = NO_CONTEXT
    note: str = ""
    prepare: tuple[Built, ...] = ()

    def static_function(self, inputs: AttentionInputs, dout: np.ndarray | None = None) -> Callable[..., Any]:
        """``function`` with its bound values and keywords, as the adapter jits it; values are built
        here (a kernel list inside the context), so call it where the compile cache misses."""
        scope = _Scope(inputs, dout)
        for step in self.prepare:
            scope.value(step)
        with self.context.enter():
            bound = tuple(scope.value(node) for node in self.bound)
            keywords = {key: scope.value(node) for key, node in self.keywords}
        return functools.partial(self.function, *bound, **keywords)

    def traced_arguments(self, inputs: AttentionInputs, dout: np.ndarray | None = None) -> tuple[Any, ...]:
        """The arguments ``static_function`` is called on: NumPy arrays (None where the case has
        none), or what a ``Built`` among them made (e.g. JAX arrays, quantized ones)."""
        scope = _Scope(inputs, dout)
        values: list[Any] = []
        for node in self.arrays:
            if isinstance(node, Star):
                values.extend(scope.value(node.node))
            else:
                values.append(scope.value(node))
        return tuple(values)


def jax_call(
    call: CallDescription,
    inputs: AttentionInputs,
    dout: np.ndarray | None = None,
    batched: tuple[bool, ...] | None = None,
    no_vmap: str = "",
) -> JaxCall:
    """The described call as the adapter runs it: its function jitted on JAX arrays inside its
    context; ``batched``: each array's axis 0 is the batch (default: all of them)."""
    with call.context.enter():
        args = tuple(
            to_jax(a) if isinstance(a, np.ndarray) else a for a in call.traced_arguments(inputs, dout)
        )
    fn = call.static_function(inputs, dout)
    batched = (True,) * len(args) if batched is None else batched
    return JaxCall(fn, args, batched, call.context.enter, no_vmap, head_axes(call))


def head_axes(call: CallDescription) -> tuple[int | None, ...] | None:
    """Each traced array's head axis: a canonical input's (``HEAD_AXES``), or what a built array
    declares (``Built.head_axis``); None where one is built without saying (a page layout)."""
    axes: list[int | None] = []
    for node in call.arrays:
        if isinstance(node, Name):
            axes.append(HEAD_AXES.get(node.name))
        elif isinstance(node, Built) and node.head_axis != UNDECLARED:
            axes.append(node.head_axis)  # type: ignore[arg-type]
        elif isinstance(node, Star) and node.head_axes is not None:
            axes.extend(node.head_axes)
        else:
            return None
    return tuple(axes)


def cache_key(call: CallDescription, inputs: AttentionInputs, dout: np.ndarray | None = None) -> Hashable:
    """What ``static_function`` and the form of ``traced_arguments`` depend on, by value: every node
    of the call (a ``functools.partial`` by its function and arguments, a dict by its items), and a
    ``Name`` among its bound values, keywords or prepare steps by the value it names (a shape
    constant, an array's dtype, shape and bytes), and a ``Built`` marked ``keyed_by_value`` by the
    value it makes. With the traced arrays' shapes and dtypes, one jitted function serves every
    call of an equal key (``CompiledCache.run``)."""
    scope = _Scope(inputs, dout)
    static = _value_key((call.prepare, call.bound, call.keywords), scope)
    return (call.function, static, _value_key((call.arrays, call.outputs, call.context), None))


def _value_key(value: Any, scope: _Scope | None) -> Hashable:
    """``value`` as a hashable key; with ``scope``, a Name by what it names."""
    if isinstance(value, Name):
        return value if scope is None else (value, _value_key(scope.value(value), None))
    if isinstance(value, Built) and value.keyed_by_value and scope is not None:
        return (value.name, _value_key(scope.value(value), None))
    if isinstance(value, np.ndarray):
        return (value.shape, str(value.dtype), value.tobytes())
    if isinstance(value, functools.partial):
        return (
            _value_key(value.func, scope),
            _value_key(value.args, scope),
            _value_key(value.keywords, scope),
        )
    if isinstance(value, types.MethodType):  # equal only for the same instance: key it by value
        return (value.__func__, _value_key(value.__self__, scope))
    if isinstance(value, dict):
        return tuple((key, _value_key(item, scope)) for key, item in sorted(value.items()))
    if isinstance(value, tuple | list):
        return tuple(_value_key(item, scope) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value), *(_value_key(getattr(value, f.name), scope) for f in fields))
    return value


# --- the suite's side: values of the nodes ----------------------------------------------------


@dataclasses.dataclass
class _Scope:
    """The case's values by script name; a ``Built`` is made once per scope."""

    inputs: AttentionInputs
    dout: np.ndarray | None
    made: dict[str, Any] = dataclasses.field(default_factory=dict)

    def value(self, node: Any) -> Any:
        if isinstance(node, Name):
            return self._named(node.name)
        if isinstance(node, Decided):
            return node.value
        if isinstance(node, Module):
            return node.value
        if isinstance(node, Member):
            return node.enum.value[node.name]
        if isinstance(node, Built):
            if node.name and node.name in self.made:
                return self.made[node.name]
            args = tuple(self.value(a) for a in node.args)
            function = self.value(node.function)
            value = function(*args, **{k: self.value(v) for k, v in node.keywords})
            if node.name:
                self.made[node.name] = value
            return value
        if isinstance(node, Star):
            raise TypeError("Star is only allowed among a CallDescription's arrays")
        return node  # a literal

    def _named(self, path: str) -> Any:
        root, *attributes = path.split(".")
        if root in SHAPE_NAMES:
            value: Any = SHAPE_NAMES[root](self.inputs.shape)
        elif root == "dout":  # in the case's dtype, as every adapter passes it
            value = None if self.dout is None else np.asarray(self.dout, dtype=self.inputs.q.dtype)
        else:
            value = getattr(self.inputs, root)
            if root in LENGTHS and value is not None:
                value = np.asarray(value, dtype=np.int32)
        for attribute in attributes:
            value = getattr(value, attribute)
        return value


# --- the script's side: text of the nodes ------------------------------------------------------


def standalone(
    forward: CallDescription, gradients: CallDescription | None = None, note: str = ""
) -> StandaloneCall:
    """The forward call (and the gradients call) as a standalone script's statements: bound values
    both directions make alike once in its setup, the rest beside each call."""
    calls = (forward,) if gradients is None else (forward, gradients)
    shared = _shared_bindings(calls)
    prepare = dict.fromkeys(step for call in calls for step in call.prepare)
    setup = "".join(f"{_text(step)}{_comment(step)}\n" for step in prepare)
    setup += "".join(_binding(node) for node in shared)
    blocks = [_call_block(call, "attention", "result", "x", FORWARD_OUTPUTS, shared) for call in calls[:1]]
    if gradients is not None:
        blocks.append(_call_block(gradients, "gradients", "grads", "g", GRADIENT_OUTPUTS, shared))
    functions, modules, constants = _embedded(calls)
    imports = ["import functools", "import jax", "import jax.numpy as jnp"]
    imports += [line for call in calls for line in _node_imports(call)]
    imports += modules
    definitions = tuple(constants) + source_of(*functions)
    if any(isinstance(n, Module) and n.interpreted_off_tpu for call in calls for n in _nodes(call)):
        shim_imports, shim, _ = standalone_shim()
        imports += shim_imports
        definitions = (*shim, *definitions)
    return StandaloneCall(
        imports=tuple(dict.fromkeys(imports)),
        definitions=definitions,
        setup=setup,
        forward=blocks[0],
        gradients=blocks[1] if gradients is not None else None,
        note=note or forward.note,
    )


def _text(node: Any) -> str:
    """A node (or literal) as the script writes it where it is used."""
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Decided):
        return node.expression
    if isinstance(node, (Module,)) or (isinstance(node, Built) and node.name):
        return node.name
    if isinstance(node, Member):
        return f"{node.enum.name}.{node.name}"
    if isinstance(node, Built):
        return _call_text(_function_name(node), node.args, node.keywords)
    if isinstance(node, Star):
        return "*" + _text(node.node)
    return repr(node)


def _function_name(node: Built) -> str:
    return node.function.name if isinstance(node.function, Module) else node.function.__name__


def _call_text(
    function: str, args: tuple[Any, ...], keywords: tuple[tuple[str, Any], ...], width: int = 0
) -> str:
    """``function(args, keywords)``; past ``LINE`` characters from column ``width``, one keyword a line."""
    written = [*(_text(a) for a in args), *(f"{k}={_text(v)}" for k, v in keywords)]
    one_line = f"{function}({', '.join(written)})"
    if width == 0 or width + len(one_line) <= LINE or not keywords:
        return one_line
    positional = ", ".join(written[: len(args)])
    lines = ([positional + ","] if positional else []) + [f"{w}," for w in written[len(args) :]]
    return f"{function}(\n" + "".join(f"    {line}\n" for line in lines) + ")"


def _children(node: Any) -> tuple[Any, ...]:
    if isinstance(node, Built):
        library = (node.function,) if isinstance(node.function, Module) else ()
        return (*library, *node.args, *(v for _, v in node.keywords))
    if isinstance(node, Star):
        return (node.node,)
    if isinstance(node, Member):
        return (node.enum,)
    return ()


def _walk(node: Any) -> Iterator[Any]:
    """``node`` and every node it reaches, dependencies first."""
    for child in _children(node):
        yield from _walk(child)
    yield node


def _nodes(call: CallDescription) -> list[Any]:
    roots = (*call.prepare, *call.bound, *call.arrays, *(v for _, v in call.keywords))
    return [n for root in roots for n in _walk(root)]


def _bindings(call: CallDescription) -> list[Any]:
    """The statements one call needs before it, in order: each module and named value once."""
    found: dict[str, Any] = {}
    for node in _nodes(call):
        if isinstance(node, Module) or (isinstance(node, Built) and node.name):
            if node.name in found and found[node.name] != node:
                raise ValueError(f"two different values are both named {node.name!r} in one call")
            found.setdefault(node.name, node)
    return list(found.values())


def _shared_bindings(calls: tuple[CallDescription, ...]) -> list[Any]:
    """Bindings every call makes alike, outside any context: written once, before the calls."""
    first, *rest = (_bindings(call) for call in calls)
    return [b for b in first if all(b in other for other in rest) and not getattr(b, "in_context", False)]


def _comment(node: Built) -> str:
    return f"  # {node.comment}" if node.comment else ""


def _binding(node: Any) -> str:
    if isinstance(node, Module):
        return _module_lines(node)
    comment = _comment(node)
    width = len(node.name) + 3 + len(comment) + (4 if node.in_context else 0)
    return f"{node.name} = {_call_text(_function_name(node), node.args, node.keywords, width)}{comment}\n"


def _module_lines(node: Module) -> str:
    attribute = f".{node.attribute}" if node.attribute else ""
    if node.attribute and node.value is None:
        return f"{node.name} = None  # {node.path} has no {node.attribute} in this JAX\n"
    if not node.interpreted_off_tpu:
        return f"{node.name} = importlib.import_module({node.path!r}){attribute}\n"
    shim = jax_version() < INT_INDEXER_SHIM_BEFORE
    return (
        "if jax.default_backend() == 'tpu':\n"
        f"    {node.name} = importlib.import_module({node.path!r}){attribute}  # natively, as shipped\n"
        "else:\n"
        "    # The kernel calls pl.pallas_call without interpret=: run a private copy of its module\n"
        "    # whose pallas_call interprets (the suite's runtime/tpu_interpret.py, inline above).\n"
        f"    {node.name} = load_interpreting_copy({node.path!r}, int_indexer_shim={shim!r}){attribute}\n"
    )


def _call_block(
    call: CallDescription,
    jitted: str,
    result: str,
    item: str,
    names: tuple[str, ...],
    shared: list[Any],
) -> str:
    """The statements of one call: its own bindings, the jitted function, the call on the arrays
    (inside the context), and the canonical outputs as NumPy arrays."""
    own = [b for b in _bindings(call) if b not in shared]
    before = "".join(_binding(b) for b in own if not getattr(b, "in_context", False))
    inside = "".join(_binding(b) for b in own if getattr(b, "in_context", False))
    partial = _call_text("functools.partial", (Name(call.function.__name__), *call.bound), call.keywords, 30)
    arrays = ", ".join(_text(a) for a in call.arrays)
    arrays = f"({arrays},)" if len(call.arrays) == 1 else f"({arrays})"
    body = (
        inside
        + f"{jitted} = jax.jit({partial})\n"
        + f"args = tuple(jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in {arrays})\n"
        + f"{result} = {jitted}(*args)\n"
    )
    if call.context.expression:
        body = f"with {call.context.expression}:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    unset = [n for n in names if n not in call.outputs]
    as_numpy = f"(None if {item} is None else np.asarray({item}) for {item} in {result})"
    return (
        before
        + body
        + f"{', '.join(call.outputs)} = {as_numpy}\n"
        + "".join(f"{n} = None  # not among this call's outputs\n" for n in unset)
    )


def _node_imports(call: CallDescription) -> list[str]:
    nodes = _nodes(call)
    lines = list(call.context.imports)
    if call.context.expression:
        lines.append("import contextlib")
    if any(isinstance(n, Module) for n in nodes):
        lines.append("import importlib")
    return lines


def _embedded(calls: tuple[CallDescription, ...]) -> tuple[list[Any], list[str], list[str]]:
    """(functions, import lines, constant lines) the script embeds: each call's function and each
    built value's, then every module-level function or class of the suite's own packages, module
    and upper-case constant that these reach by name (``EMBEDDABLE_PACKAGES``)."""
    queue: list[Any] = []
    for call in calls:
        queue.append(call.function)
        queue += call.context.functions
        queue += [
            n.function for n in _nodes(call) if isinstance(n, Built) and not isinstance(n.function, Module)
        ]
    functions: list[Any] = []
    modules: dict[str, str] = {}
    constants: dict[str, str] = {}
    while queue:
        obj = queue.pop(0)
        if obj in functions:
            continue
        functions.append(obj)
        for name, value in _globals_used(obj):
            # a decorated function (functools.cache, contextlib.contextmanager) as its source has it
            if inspect.isfunction(inspect.unwrap(value)) or inspect.isclass(value):
                if value.__module__.startswith(EMBEDDABLE_PACKAGES) and value not in functions:
                    queue.append(value)
            elif isinstance(value, types.ModuleType):
                modules[name] = _import_line(name, value)
            elif name.isupper() and isinstance(value, int | float | str | bool | tuple):
                constants[name] = f"{name} = {value!r}\n"
    _one_source_a_name(functions)
    return functions, list(modules.values()), list(constants.values())


def _one_source_a_name(functions: list[Any]) -> None:
    """ValueError where two embedded functions share a name: the script embeds each under its own
    name, so the later definition would replace the earlier one for every caller."""
    named: dict[str, Any] = {}
    for function in functions:
        other = named.setdefault(function.__name__, function)
        if other is not function:
            raise ValueError(
                f"two embedded functions are both named {function.__name__!r} ({other.__module__} and "
                f"{function.__module__}): the script would keep one; rename one"
            )


def _globals_used(obj: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) of each module-level name ``obj``'s code reads (nested functions included)."""
    obj = inspect.unwrap(obj)
    functions = [obj] if inspect.isfunction(obj) else [m for m in vars(obj).values() if inspect.isfunction(m)]
    for function in functions:
        namespace = function.__globals__
        for name in _global_names(function.__code__):
            if name in namespace:  # read now: a module's value may differ from the last script's
                yield name, namespace[name]


@functools.lru_cache(maxsize=1024)  # every repro of a run disassembles the same few dozen functions
def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """The global names ``code`` and the functions nested in it load, in order of appearance."""
    names: list[str] = []
    codes = [code]
    while codes:
        code = codes.pop()
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        names += (i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
    return tuple(names)


def _import_line(name: str, module: types.ModuleType) -> str:
    if module.__name__ == name:
        return f"import {name}"
    parent, _, leaf = module.__name__.rpartition(".")
    if leaf == name:
        return f"from {parent} import {name}"
    return f"import {module.__name__} as {name}"
