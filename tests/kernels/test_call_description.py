"""kernels/runtime/call_description.py: one description of a call, run here and written as script.

The scripts of every JAX subject are run against the adapters' own calls in
tests/conformance/judge/test_standalone.py (``test_the_scripts_call_returns_the_suites_values_bitwise``);
these are the renderer's rules, on small descriptions."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools

import numpy as np
import pytest

from kernels.adapters import paged_attention, splash
from kernels.runtime.call_description import (
    Built,
    CallDescription,
    Context,
    Decided,
    Module,
    Name,
    Star,
    cache_key,
    constructed,
    head_axes,
    jax_call,
    standalone,
    tpu_interpret_context,
)
from reference.spec import AttentionInputs


def _inputs() -> AttentionInputs:
    q = np.ones((2, 4, 8, 16), np.float32)
    kv = np.ones((2, 2, 12, 16), np.float32)
    return AttentionInputs(q, kv, kv, kv_lengths=np.array([12, 5], dtype=np.int64))


def test_the_suite_builds_each_value_once_in_the_context_and_passes_the_arrays():
    made, entered = [], []

    def layout(k, length):
        made.append(length)
        return (k[:, :, :length], np.asarray(length))

    @contextlib.contextmanager
    def context():
        entered.append(True)
        yield

    shared = Built("layout", layout, (Name("k"), Name("SK")))
    call = CallDescription(
        np.add,
        (Name("q"), Star(shared), Name("kv_lengths"), Name("dout")),
        bound=(Built("kernel", layout, (Name("v"), 3), in_context=True),),
        keywords=(("shape", Name("k.shape")), ("interpret", Decided(True, "jax.default_backend() != 'tpu'"))),
        context=Context(context, "interpreting()"),
    )
    inputs = _inputs()
    args = call.traced_arguments(inputs, dout=np.zeros((2, 4, 8, 16), np.float64))
    assert [a.shape for a in args[:3]] == [(2, 4, 8, 16), (2, 2, 12, 16), ()]
    assert args[3].dtype == np.int32 and args[4].dtype == np.float32  # lengths int32; dout in q's dtype
    fn = call.static_function(inputs)
    assert entered == [True] and made == [12, 3]
    assert fn.keywords == {"shape": (2, 2, 12, 16), "interpret": True} and fn.args[0][0].shape == (
        2,
        2,
        3,
        16,
    )


def test_shared_values_go_to_the_setup_and_each_directions_own_inside_its_context():
    mask = Built("layout", splash.mask_layout, (True, "top_left", None, Name("SQ"), Name("SK")))
    context = Context(contextlib.nullcontext, "interpreting()", ("import interpreting_module",))

    def call(function, backward):
        kernels = Built("kernels", splash.kernel_blocks, (mask, backward), in_context=True)
        arrays = (Name("q"), Name("k"), Name("v")) + ((Name("dout"),) if backward else ())
        outputs = ("dq", "dk", "dv", "dsinks") if backward else ("out", "lse")
        return CallDescription(function, arrays, (kernels,), (("scale", 0.5),), outputs, context)

    written = standalone(call(splash.splash_forward, False), call(splash.splash_gradients, True))
    assert written.setup == "layout = mask_layout(True, 'top_left', None, SQ, SK)\n"
    assert written.forward.startswith(
        "with interpreting():\n    kernels = kernel_blocks(layout, False)\n"
        "    attention = jax.jit(functools.partial(splash_forward, kernels, scale=0.5))\n"
    )
    assert "    grads = gradients(*args)\n" in written.gradients
    assert written.gradients.endswith(
        "dq, dk, dv, dsinks = (None if g is None else np.asarray(g) for g in grads)\n"
        "dbias = None  # not among this call's outputs\n"
    )
    assert "import interpreting_module" in written.imports and "import contextlib" in written.imports


def test_the_script_embeds_what_the_call_reaches_by_name():
    layout = Built(
        "layout", paged_attention.paged_layout, (Name("k"), Name("v"), Name("kv_lengths"), 4, "float", 0)
    )
    module = Module("kernel", "some.module", None, attribute="kernel")
    written = standalone(CallDescription(paged_attention.paged_forward, (Name("q"), Star(layout)), (module,)))
    names = [d.split("(")[0].split(" =")[0].removeprefix("def ") for d in written.definitions]
    assert {
        "paged_forward",
        "paged_layout",
        "page_table",
        "scatter_pages",
        "int8_pages",
        "int8_quantize",
    } <= set(names)
    assert {"PAGE_SIZE", "SPARE_PAGES", "GARBAGE_STD"} <= set(names)  # module constants the functions read
    assert "import math" in written.imports and "import importlib" in written.imports
    assert written.setup.startswith("kernel = None  # some.module has no kernel in this JAX\n")
    assert "for x in (q, *layout))" in written.forward


def page_table(batch: int, width: int, seed: int) -> tuple[np.ndarray, int]:
    """Another function of paged_attention.page_table's name."""
    return np.zeros((batch, width), np.int32), seed


def test_two_embedded_functions_of_one_name_are_refused():
    """The script defines each under its own name: the later would replace the earlier."""
    theirs = Built("theirs", paged_attention.page_table, (1, 1, 0))
    ours = Built("ours", page_table, (1, 1, 0))
    with pytest.raises(ValueError, match="both named 'page_table'"):
        standalone(CallDescription(paged_attention.paged_forward, (theirs, ours)))
    standalone(CallDescription(paged_attention.paged_forward, (theirs,)))


def test_head_axes_come_from_the_canonical_names_and_a_built_array_leaves_them_undeclared():
    """What ``jax.vmap`` along heads splits: [B, H, S, D] inputs on axis 1, sinks [Hq] on 0, segment
    ids and lengths nowhere; an array built from the case (a page layout) has the builder's heads."""
    names = ("q", "k", "v", "q_segment_ids", "kv_lengths", "sinks", "dout")
    described = CallDescription(np.add, tuple(Name(n) for n in names))
    assert head_axes(described) == (1, 1, 1, None, None, 0, 1)
    layout = Built("layout", lambda k: (k, k), (Name("k"),))
    assert head_axes(CallDescription(np.add, (Name("q"), Star(layout)))) is None
    # a built array that says where its heads are (tokamax_splash's mask planes, [Bm, Hm, Sq, Sk])
    planes = Built("planes", np.asarray, (Name("mask"),), head_axis=1)
    assert head_axes(CallDescription(np.add, (Name("q"), planes, Name("q_segment_ids")))) == (1, 1, None)
    assert head_axes(CallDescription(np.add, (Built("x", np.asarray, (Name("q"),)),))) is None
    call = jax_call(CallDescription(lambda q, k: (q, k), (Name("q"), Name("k"))), _inputs())
    assert call.heads == (1, 1)
    # arrays a builder spreads, saying where each keeps its heads (tokamax's q, k, v ... lengths)
    spread = Star(Built("", lambda q, k: (q, k), (Name("q"), Name("k"))), (1, 1))
    assert head_axes(CallDescription(np.add, (spread, Name("kv_lengths")))) == (1, 1, None)


def _keyed(scale=0.5, chunk=(16, 32), cores=1, length="SK"):
    """A description built afresh, as an adapter builds one per call: new partials and dicts."""
    op = Built("op", dict, (Module("np", "numpy", np), {"chunk_size": chunk}, Name(length)))
    enter = functools.partial(contextlib.nullcontext, cores)
    return CallDescription(
        np.add,
        (Name("q"), Star(Built("", tuple, (Name("k"),)))),
        (op,),
        (("scale", scale), ("interpret", Decided(True, "jax.default_backend() != 'tpu'"))),
        context=Context(enter, "interpreting()"),
    )


def test_the_cache_key_is_the_calls_static_part_by_value():
    """Equal for two descriptions built alike; another keyword, bound value, context argument or
    value named among the bound values is another key; the traced arrays' values are not in it."""
    inputs = _inputs()
    key = cache_key(_keyed(), inputs)
    assert hash(key) == hash(cache_key(_keyed(), inputs)) and key == cache_key(_keyed(), inputs)
    others = (_keyed(scale=0.25), _keyed(chunk=(16, 16)), _keyed(cores=2), _keyed(length="SQ"))
    assert all(cache_key(other, inputs) != key for other in others)
    changed = dataclasses.replace(inputs, q=inputs.q + 1, k=inputs.k * 2)
    assert cache_key(_keyed(), changed) == key
    by_values = dataclasses.replace(_keyed(), bound=(Built("lengths", np.asarray, (Name("kv_lengths"),)),))
    lengths = dataclasses.replace(inputs, kv_lengths=np.array([12, 6]))
    assert cache_key(by_values, lengths) != cache_key(by_values, inputs)


def test_a_tpu_interpret_context_is_keyed_by_its_interpreter_and_cores_not_by_identity():
    """Each call builds its context afresh: equal ones must key alike, or every call compiles again
    (a bound method's ``TpuExecution.context`` compares its execution by identity)."""
    inputs = _inputs()

    def keyed(interpreter, cores=1):
        return cache_key(
            dataclasses.replace(_keyed(), context=tpu_interpret_context(interpreter, cores)), inputs
        )

    assert keyed("generic") == keyed("generic") and keyed("tpu", 2) == keyed("tpu", 2)
    assert len({keyed("generic"), keyed("tpu"), keyed("tpu", 2)}) == 3


def test_a_context_entered_through_a_fresh_instances_method_keys_by_the_instances_value():
    """``tpu_interpret_context`` enters through ``choose_execution(...).context``, a method of an
    instance made per call: Python compares bound methods by their instance's identity, which would
    make every call another key (a compile per call)."""
    keys = {cache_key(dataclasses.replace(_keyed(), context=tpu_interpret_context("tpu")), _inputs())}
    keys.add(cache_key(dataclasses.replace(_keyed(), context=tpu_interpret_context("tpu")), _inputs()))
    assert len(keys) == 1
    two_cores = dataclasses.replace(_keyed(), context=tpu_interpret_context("tpu", cores=2))
    assert cache_key(two_cores, _inputs()) not in keys


def test_a_built_keyed_by_value_is_one_key_for_every_input_that_makes_its_value():
    """A value read from the arrays but compiled in (quantized pages' scales): keyed by what it
    makes, so inputs that make it alike share a key, and the arrays' bytes are not in it."""

    def step(k):
        return float(np.abs(k).max() >= 1)

    def described(by_value):
        scale = Built("scale", step, (Name("k"),), keyed_by_value=by_value)
        return CallDescription(np.add, (Name("q"),), (scale,))

    inputs = _inputs()
    alike, other = dataclasses.replace(inputs, k=inputs.k * 1.5), dataclasses.replace(inputs, k=inputs.k / 2)
    assert cache_key(described(True), alike) == cache_key(described(True), inputs)
    assert cache_key(described(True), other) != cache_key(described(True), inputs)
    assert cache_key(described(False), alike) != cache_key(described(False), inputs)  # by K's bytes


class Layout(enum.Enum):
    HEAD_DIM_MINOR = 1
    SEQ_MINOR = 2


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """A library's Config as tokamax writes them: blocks, an enum, a default, a derived field."""

    block_q: int
    layout: Layout
    base2: bool = True
    block_d: int | None = None
    derived: int = dataclasses.field(init=False, default=0)


@dataclasses.dataclass(frozen=True)
class RoundingConfig:
    block_q: int

    def __post_init__(self):
        object.__setattr__(self, "block_q", self.block_q - self.block_q % 128)


def test_a_config_is_written_as_its_constructor_call_and_the_suite_passes_what_that_call_makes():
    config = BlockConfig(256, Layout.SEQ_MINOR, base2=False)
    node = constructed("forward_config", config, "ForwardConfig")
    call = CallDescription(lambda config, q: (q, None), (Name("q"),), (node,))
    assert call.static_function(_inputs()).args == (config,)  # the suite's value: the call below
    written = standalone(call)
    module = "tests.kernels.test_call_description"
    assert written.setup == (
        f"ForwardConfig = importlib.import_module({module!r}).BlockConfig\n"
        f"Layout = importlib.import_module({module!r}).Layout\n"
        "forward_config = ForwardConfig(block_q=256, layout=Layout.SEQ_MINOR, base2=False, block_d=None)\n"
    )
    assert not any("BlockConfig" in d for d in written.definitions)  # imported, not embedded
    scope: dict = {}
    exec("import importlib\n" + written.setup, scope)  # noqa: S102 - the setup just rendered
    assert scope["forward_config"] == config


def test_a_config_its_constructor_cannot_rebuild_is_refused():
    rounded = RoundingConfig(256)
    object.__setattr__(rounded, "block_q", 200)  # a value its __post_init__ would round to 128
    with pytest.raises(ValueError, match="does not rebuild"):
        constructed("config", rounded, "Config")
    with pytest.raises(TypeError, match="a list field has no script form"):
        constructed("config", BlockConfig(128, Layout.SEQ_MINOR, block_d=[64]), "Config")
