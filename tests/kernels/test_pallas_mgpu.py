"""pallas_mgpu, JAX's Mosaic GPU flash attention: unavailable without a Hopper GPU, with the reason;
its declarations read in the module; and its translation (layout, scale, base-2 lse), run here with
the module's own ``attention_reference`` standing in for the kernel, which needs a Hopper GPU."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

from kernels.adapters.pallas_mgpu import MODULE, PallasMgpuAdapter, constraints, mgpu_forward
from kernels.registry import resolve
from kernels.runtime.jax_runtime import default_backend
from reference.attention import attention_forward
from reference.spec import AttentionShape, AttentionSpec
from tests.kernels.cases import make_inputs

has_module = importlib.util.find_spec(MODULE) is not None


@pytest.mark.skipif(default_backend() == "gpu", reason="a GPU is attached")
def test_without_a_gpu_it_is_unavailable_and_says_it_needs_hopper_and_why_no_interpreter():
    availability = resolve("pallas_mgpu").availability()
    assert not availability.available
    assert "compute capability 9.0" in availability.reason and "Hopper" in availability.reason
    assert f"JAX runs on {default_backend()} here" in availability.reason
    assert "no interpreter runs it" in availability.reason
    assert availability.reason.count("\n") == 0
    assert dict(availability.versions)["jax"] != "missing"


def test_a_module_that_does_not_import_is_unavailable_with_the_import_named(monkeypatch):
    import kernels.adapters.pallas_mgpu as adapter_module

    monkeypatch.setattr(adapter_module, "MODULE", "jax.experimental.pallas.ops.gpu.no_such_module")
    availability = PallasMgpuAdapter().availability()
    assert not availability.available
    assert "importing jax.experimental.pallas.ops.gpu.no_such_module failed" in availability.reason


def test_declarations_follow_the_module_source():
    caps = PallasMgpuAdapter().capabilities()
    assert caps.dtypes == ("bfloat16", "float16") and not caps.backward and caps.lse and caps.gqa
    assert not (caps.bias or caps.window or caps.lengths or caps.softcap or caps.distinct_v_dim)

    def rejected(shape):
        return sorted(c.name for c in constraints(None) if not c.satisfied(shape, AttentionSpec()))

    assert rejected(AttentionShape(1, 2, 1, 128, 192, 64, 64)) == []
    assert rejected(AttentionShape(1, 2, 1, 128, 128, 96, 96)) == ["head_dim_multiple_of_64"]
    assert rejected(AttentionShape(1, 2, 1, 128, 100, 64, 64)) == ["kv_len_multiple_of_block_kv"]
    assert rejected(AttentionShape(1, 2, 1, 64, 128, 64, 64)) == ["q_len_multiple_of_two_q_blocks"]
    exceptions = {c.name: c.exceptions for c in constraints(None)}
    assert exceptions["q_len_multiple_of_two_q_blocks"] == ("NotImplementedError",)
    assert (
        exceptions["head_dim_multiple_of_64"] == exceptions["kv_len_multiple_of_block_kv"] == ("ValueError",)
    )


@pytest.mark.parametrize(
    ("runtime", "declared"), [(12080, True), (12090, True), (12091, False), (12060, False)]
)
def test_causal_is_declared_to_raise_only_on_the_cuda_runtimes_the_module_refuses(runtime, declared):
    causal = [c for c in constraints(runtime) if c.name == "no_causal_on_cuda_12_8"]
    assert bool(causal) == declared
    if causal:
        shape = AttentionShape(1, 1, 1, 128, 128, 64, 64)
        assert not causal[0].satisfied(shape, AttentionSpec(causal=True))
        assert causal[0].satisfied(shape, AttentionSpec())


@pytest.mark.skipif(not has_module, reason=f"{MODULE} is not in this JAX")
@pytest.mark.parametrize("causal", [False, True])
def test_the_translation_matches_the_reference_with_the_modules_reference_as_the_kernel(causal):
    """Layout both ways, the scale on q, GQA heads and lse from base 2: wrong in any of them and the
    float64 comparison fails. The stand-in takes the kernel's arguments and returns what it does."""
    import importlib

    import jax

    module = importlib.import_module(MODULE)

    def kernel_stand_in(q, k, v, config, save_residuals):
        return module.attention_reference(q, k, v, causal=config.causal, save_residuals=save_residuals)

    config = module.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2, causal=causal)
    inputs = make_inputs(0, b=2, hq=4, hkv=2, sq=128, sk=128, d=64)
    spec = AttentionSpec(causal=causal, scale=0.3)
    fn = jax.jit(functools.partial(mgpu_forward, kernel_stand_in, config, scale=0.3))
    out, lse = fn(inputs.q, inputs.k, inputs.v)
    ref = attention_forward(inputs, spec)
    np.testing.assert_allclose(np.asarray(out), ref.out, atol=2e-5)
    np.testing.assert_allclose(np.asarray(lse), ref.lse, atol=2e-5)


@pytest.mark.skipif(not has_module, reason=f"{MODULE} is not in this JAX")
def test_the_adapter_runs_its_description_compiled_once_per_static_call(monkeypatch):
    """forward runs the description its script is written from; the compile cache is keyed by it:
    equal calls share a compile, causal (a TuningConfig field) is another. The module's
    ``attention_reference`` stands in for the kernel, which needs a Hopper GPU."""
    import importlib

    import kernels.adapters.pallas_mgpu as adapter_module

    module = importlib.import_module(MODULE)

    def kernel_stand_in(q, k, v, config, save_residuals):
        return module.attention_reference(q, k, v, causal=config.causal, save_residuals=save_residuals)

    monkeypatch.setattr(
        adapter_module, "_load_api", lambda: adapter_module._Api(kernel_stand_in, module.TuningConfig, None)
    )
    adapter = PallasMgpuAdapter()
    inputs = make_inputs(0, b=1, hq=2, hkv=1, sq=128, sk=128, d=64)
    for causal in (False, True, False):
        spec = AttentionSpec(causal=causal)
        result = adapter.forward(inputs, spec)
        np.testing.assert_allclose(result.out, attention_forward(inputs, spec).out, atol=2e-5)
    assert len(adapter._cache) == 2
    adapter.forward(make_inputs(1, b=1, hq=2, hkv=1, sq=128, sk=128, d=64), AttentionSpec())
    assert len(adapter._cache) == 2  # new values, same shapes and statics: the same compile


@pytest.mark.skipif(not has_module, reason=f"{MODULE} is not in this JAX")
def test_its_repro_script_imports_the_kernel_and_builds_the_same_tuning_config():
    inputs = make_inputs(0, b=1, hq=2, hkv=1, sq=128, sk=128, d=64)
    call = PallasMgpuAdapter().standalone(inputs, AttentionSpec(causal=True))
    text = "\n".join((*call.imports, *call.definitions, call.setup, call.forward))
    compile(text, "repro.py", "exec")
    assert f"kernel = importlib.import_module({MODULE!r}).attention" in text
    config = text[text.index("config = TuningConfig(") :]
    assert all(f"{field}," in config for field in ("block_q=64", "block_kv=64", "causal=True"))
    assert "functools.partial(mgpu_forward, kernel, config, scale=0.125)" in call.forward
    assert "def mgpu_forward(" in text and call.gradients is None
